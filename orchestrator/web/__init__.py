"""The job's web page and Prometheus ``/metrics`` (aiohttp; the page's assets ship in ``static/``)."""
