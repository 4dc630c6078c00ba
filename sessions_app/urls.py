from django.urls import path

from . import views

app_name = "sessions"
urlpatterns = [
    path("", views.session_list, name="list"),
    # Keys are free text (colons, slashes): the path converter keeps them whole.
    path("s/<path:session_key>", views.session_detail, name="detail"),
]
