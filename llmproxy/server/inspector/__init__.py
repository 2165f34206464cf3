"""The inspector: a page at GET /inspect that shows what the server is doing and did.

    steps.py     the bodies of one request's steps, kept only with ``--capture`` (they hold user data)
    recent.py    the last requests, bounded by count and bytes, and their live feed to open pages
    views.py     what the page is sent: the overview of each model, a request's summary and its steps
    access.py    who may see it: the server's key (as on /v1) and no other site's pages
    rerun.py     a captured request run again with another wrapper, syntax, grammar or settings
    routes.py    the page, its files (static/) and its data endpoints

Nothing is imported here: the request log imports ``steps`` and must not pull in the rest.
"""
