"""The HTTP service, its model process and the web IME page."""
