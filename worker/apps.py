from __future__ import annotations

from django.apps import AppConfig


class WorkerConfig(AppConfig):
    """The workers: django-q2 task bodies, supervision and the ``qcluster`` command that
    replaces django-q2's (so this app is installed before ``django_q``)."""

    name = "worker"
