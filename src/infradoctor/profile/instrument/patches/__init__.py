"""One module per hook the recorder installs into torch.

Host reads, autograd and optimizer, data loading, weight loading and module construction, host-to-device copies,
allocation sites.
"""
