"""``manage.py qcluster``: django-q2's cluster with TARSy's supervision (worker/supervision.py).

This app is listed before ``django_q`` in INSTALLED_APPS, so this command replaces
django-q2's own: operators keep typing ``qcluster`` and get recovery, orphan-proof
workers and a stop within ``TARSY_SHUTDOWN_GRACE`` with it.
"""

from __future__ import annotations

import logging
import os
import sys

from django import db
from django.conf import settings
from django_q.cluster import Cluster
from django_q.management.commands.qcluster import Command as DjangoQCommand

from worker import supervision


def warm_up() -> None:
    """What every worker's first session would otherwise wait for, done once here in the
    process they fork from: the agent stack and the LLM SDKs imported (LangChain's take
    seconds), the MCP servers' tools listed (and their health recorded)."""
    import agents.executor  # noqa: F401
    from agents.tools.toolbox import warm_catalog
    from config.loader import get_config
    from llm.warm import warm_backends

    if settings.TARSY_WARM_BACKENDS:
        warm_backends()
    warm_catalog(get_config())


class Command(DjangoQCommand):
    help = (
        "Run TARSy's workers: a django-q2 cluster, its recovery loop, orphan guard and "
        "graceful stop (TARSY_SHUTDOWN_GRACE)."
    )

    def handle(self, *args, **options) -> None:
        settings.SECRET_KEY  # noqa: B018 - django-q2 signs tasks with it: fail early
        if options.get("cluster_name"):
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        supervision.prepare_cluster()
        warm_up()
        # Each process opens its own connections: one inherited across fork would be
        # closed by the child under the parent's feet (PostgreSQL).
        db.connections.close_all()
        cluster = Cluster(broker=supervision.Broker())
        supervision.take_stop_signals()
        cluster.start()
        if options.get("run_once"):
            cluster.stop()
            return
        stopped = supervision.supervise(
            cluster.sentinel, cluster.stop_event, workers=settings.Q_CLUSTER["workers"]
        )
        # Every process of the cluster has ended. The interpreter's own teardown (freeing
        # every object of the agent stack and the LLM SDKs) would take seconds of CPU out
        # of a container's stop timeout, and leaves nothing the kernel does not clean up.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0 if stopped else 1)
