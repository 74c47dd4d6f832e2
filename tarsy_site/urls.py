from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from sessions import api
from sessions.urls import api_urlpatterns

urlpatterns = [
    path("health", api.health, name="health"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_urlpatterns)),
    path("", include("sessions.urls")),
]
