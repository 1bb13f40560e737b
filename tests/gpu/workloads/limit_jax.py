"""JAX under `cudatrace run --limit`: the pool it preallocates (75% of the
memory it is told the card has), from its own allocator's figures."""
import json
import sys

import jax
import jax.numpy as jnp

x = jnp.ones((1024, 1024), dtype=jnp.float32)
(x @ x).block_until_ready()
stats = jax.devices()[0].memory_stats() or {}
json.dump({"bytes_limit": stats.get("bytes_limit"), "pool_bytes": stats.get("pool_bytes")}, open(sys.argv[1], "w"))
