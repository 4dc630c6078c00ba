"""The operator console: views, the selectors that shape their data, template tags and helpers.

Pages read through ``console.selectors`` (and the ledger's shared ``selectors``) and act only
through the services (``receipts_app.requeue``, ``receipts_app.services``); nothing here decides
a business rule of its own.
"""
