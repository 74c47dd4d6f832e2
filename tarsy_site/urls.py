from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.views.decorators.http import require_GET

from api import metrics_views
from api.rest import api, api_urlpatterns
from api.rest.system import health_response


@login_not_required
@require_GET
def health(request: HttpRequest) -> HttpResponse:
    return health_response()


@require_GET
def api_docs(request: HttpRequest) -> HttpResponse:
    """Swagger UI from ninja's own static files (no CDN), for logged-in users."""
    return api.docs.render_page(request, api)


urlpatterns = [
    path("health", health, name="health"),
    path("metrics", metrics_views.metrics, name="metrics"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/docs", api_docs, name="api-docs"),
    path("api/v1/", include((api_urlpatterns, "api-v1"), namespace="api-v1")),
    path("", include("web.urls")),
]
