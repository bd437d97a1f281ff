"""(b) Monte-Carlo tree search "using the self-awareness criterion in place of the Upper Confidence
Bound formula" (MUSE §3.1.2).

Our reading: the child to descend into is chosen by the self-awareness criterion alone, Q = the mean
predicted competence (sum of psi_i) backed up through that child's subtree, replacing the whole UCB
score Q + c * sqrt(N_parent) / (1 + N_child) (not putting competence inside it). Exploration comes from
the actor: every expansion samples `branching` actions from pi, and a subtree's Q drops when its
newly expanded leaves predict less success, sending the next simulation elsewhere. The paper gives no
more detail (the implemented MUSE uses option (c)); `regulation.mcts_c` is therefore unused.

Fixed-size arrays so it jit-compiles: at most 1 + simulations * branching nodes. Each simulation
descends by `selection_score`, expands the leaf with `branching` actor actions (one prior step
each), values the leaf by its best child's competence, and backs that up to the root. The root
child with the highest criterion Q gives the action.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from muse_jax.competence import competence
from muse_jax.config import Config
from muse_jax.nets import feature


def selection_score(q_C: jax.Array, visits_parent: jax.Array, visits_C: jax.Array) -> jax.Array:
    """The self-awareness criterion in place of UCB: the children's backed-up competence, no visit bonus."""
    del visits_parent, visits_C
    return q_C


def regulate_one(agent, h_D: jax.Array, z_SxK: jax.Array, key: jax.Array, cfg: Config,
                 ) -> tuple[jax.Array, dict[str, jax.Array]]:
    r = cfg.regulation
    nb, sims, depth_max = r.mcts_branching, r.mcts_simulations, r.horizon
    M = 1 + sims * nb
    A = agent.wm.spec.act_dim
    comp = lambda h, z: competence(agent.wm.competence_probs(feature(h, z)))
    tree = dict(
        deter=jnp.zeros((M, *h_D.shape), jnp.float32).at[0].set(h_D),
        stoch=jnp.zeros((M, *z_SxK.shape), jnp.float32).at[0].set(z_SxK),
        action=jnp.zeros((M, A), jnp.float32),
        parent=jnp.full((M,), -1, jnp.int32),
        depth=jnp.zeros((M,), jnp.int32),
        children=jnp.full((M, nb), -1, jnp.int32),
        visits=jnp.zeros((M,), jnp.float32).at[0].set(1.0),
        value=jnp.zeros((M,), jnp.float32).at[0].set(comp(h_D[None], z_SxK[None])[0]),
        size=jnp.int32(1),
    )

    def select(t):
        def cond(node):
            return (t["children"][node, 0] >= 0) & (t["depth"][node] < depth_max)

        def body(node):
            ch = t["children"][node]
            n = t["visits"][ch]
            q = t["value"][ch] / jnp.maximum(n, 1.0)
            return ch[jnp.argmax(selection_score(q, t["visits"][node], n))]

        return jax.lax.while_loop(cond, body, jnp.int32(0))

    def simulate(t, k):
        node = select(t)
        ka, kz = jax.random.split(k)
        h = jnp.broadcast_to(t["deter"][node], (nb, *h_D.shape))
        z = jnp.broadcast_to(t["stoch"][node], (nb, *z_SxK.shape))
        a = agent.actor.sample(feature(h, z), ka)
        nxt, _ = agent.wm.rssm.img_step(dict(deter=h, stoch=z), a, kz)
        c = comp(nxt["deter"], nxt["stoch"])
        expand = (t["depth"][node] < depth_max) & (t["children"][node, 0] < 0)
        idx = t["size"] + jnp.arange(nb, dtype=jnp.int32)
        safe = jnp.where(expand, idx, M)  # out-of-range writes are dropped
        t = dict(t)
        t["deter"] = t["deter"].at[safe].set(nxt["deter"], mode="drop")
        t["stoch"] = t["stoch"].at[safe].set(nxt["stoch"], mode="drop")
        t["action"] = t["action"].at[safe].set(a, mode="drop")
        t["parent"] = t["parent"].at[safe].set(node, mode="drop")
        t["depth"] = t["depth"].at[safe].set(t["depth"][node] + 1, mode="drop")
        t["visits"] = t["visits"].at[safe].set(1.0, mode="drop")
        t["value"] = t["value"].at[safe].set(c, mode="drop")
        t["children"] = jnp.where(expand, t["children"].at[node].set(idx), t["children"])
        t["size"] = t["size"] + jnp.where(expand, nb, 0)
        leaf_value = jnp.where(expand, c.max(), t["value"][node] / jnp.maximum(t["visits"][node], 1.0))

        def backup(carry):
            tt, n = carry
            tt = dict(tt)
            tt["visits"] = tt["visits"].at[n].add(1.0)
            tt["value"] = tt["value"].at[n].add(leaf_value)
            return tt, tt["parent"][n]

        t, _ = jax.lax.while_loop(lambda c_: c_[1] >= 0, backup, (t, node))
        return t, None

    tree, _ = jax.lax.scan(simulate, tree, jax.random.split(key, sims))
    root_children = tree["children"][0]
    n = tree["visits"][root_children]
    q = tree["value"][root_children] / jnp.maximum(n, 1.0)
    best = root_children[jnp.argmax(q)]
    return tree["action"][best], {"root_visits": n, "root_q": q, "competence_final": q.max(),
                                  "tree_size": tree["size"]}


def regulate(agent, h_BxD: jax.Array, z_BxSxK: jax.Array, key: jax.Array, cfg: Config,
             ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Batched over environments with vmap: actions [B, A]."""
    keys = jax.random.split(key, h_BxD.shape[0])
    return jax.vmap(lambda h, z, k: regulate_one(agent, h, z, k, cfg))(h_BxD, z_BxSxK, keys)
