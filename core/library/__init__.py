"""The kernel library a model imports: the manifest format, the dispatcher, PyTorch ops, patch(model)."""
