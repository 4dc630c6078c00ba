import os

from django.core.wsgi import get_wsgi_application

from opensquilla_site.runtime import ensure_runtime_dirs

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opensquilla_site.settings")
ensure_runtime_dirs()
application = get_wsgi_application()
