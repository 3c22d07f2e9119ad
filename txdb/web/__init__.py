"""txdb in Datasette: the plugin (``plugin``, loaded through the ``datasette``
entry point), its template and stylesheet, txdb's metadata for the views
(``metadata``) and the loopback Host guard (``hostcheck``)."""
