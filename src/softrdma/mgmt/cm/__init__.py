"""The IB Communication Manager (IBA ch. 12), ib_core's cm.c, sans-IO."""
