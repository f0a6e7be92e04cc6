"""`vit serve`: a local prediction service for a trained ViT.

`app` builds the ASGI application (TF Serving's REST API, the page, health), `tf_serving` reads
and writes TF Serving's JSON, `batching` queues and batches concurrent requests, `running` serves
until SIGTERM or Ctrl+C and then drains, and `page/` holds the single web page, served as static
files.
"""

from vit_app.inference.server.app import ServeOptions, create_app

__all__ = ["ServeOptions", "create_app"]
