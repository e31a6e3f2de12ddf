"""Renderings of results: the console table, and (later) markdown, HTML and CSV reports."""
