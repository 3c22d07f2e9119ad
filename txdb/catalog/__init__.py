"""The SQLite catalog: schema, ingest, and the read-side features built on it.
Imports txdb.model and the base modules, never surgery, web or cli."""
