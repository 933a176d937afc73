"""The network side of training: model, loss and optimizer behind one object."""
