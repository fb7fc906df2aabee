"""RAGFlow's web tools (TavilySearch, Google, Wikipedia...): one module per service, on `_web.WebTool`.

Each module registers its components like any other component module (listed in `components/__init__.py`
as `tools.<module>`). How to write one: see `_web.py` and docs/tools.md.
"""
