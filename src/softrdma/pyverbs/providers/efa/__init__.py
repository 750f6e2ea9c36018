"""pyverbs.providers.efa: EFA direct verbs (rdma-core pyverbs/providers/efa)."""
