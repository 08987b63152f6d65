"""Standalone scripts run by the target interpreter (``python -I script.py``).

They import nothing from trainstack, so they work in any environment, and print one JSON
document on stdout. Their path is found with importlib.resources.
"""
