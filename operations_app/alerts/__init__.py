"""Alerts: rules an admin manages, evaluated from beat, delivered with retries.

- ``validation``: what a rule may say (one place for the console form and the admin).
- ``conditions``: which subjects a rule finds firing now.
- ``evaluate``: incidents (dedup, cooldown, resolve) and the deliveries they create.
- ``channels``: the JSON webhook (HMAC-SHA256), Slack-compatible webhook and e-mail senders.
- ``delivery``: one attempt of one delivery, recorded; the Celery task retries with backoff.
- ``service``: create, update, send a test; every surface calls these.
"""
