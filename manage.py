#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opensquilla_site.settings")
    from django.core.management import execute_from_command_line

    from opensquilla_site.runtime import ensure_runtime_dirs

    ensure_runtime_dirs()
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
