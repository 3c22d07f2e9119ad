"""Session surgery: copy-first pending copies, operations, apply."""
