"""Workloads: seeded request streams as page chains, from synthetic kinds or a replayed trace."""
