"""The plan of a score request's model work, built on the host before the model is taken:
the radix tree over the rows' token sequences, the model calls that forward it (walk or
bounded tree packs), and every index those calls need in two flat arrays, uploaded to the
device once per request.

Guarantees:
- no recursion anywhere (a chain of thousands of rows is a tree thousands of nodes deep);
- every distinct prefix of the rows is forwarded exactly once, in either packing;
- "walk": one call per tree edge, each on top of its parent's key/value cache;
- "tree": no call holds more than pack_tokens tokens. The subtrees under a node that fit
  are packed, whole, into calls of at most pack_tokens tokens that attend to the node's
  cached path and, inside the pack, to their ancestors (tree positions, an ancestor mask);
  the node's own edge rides in the first such pack when it fits, else goes in chunks of at
  most pack_tokens on the cache of its path; subtrees that do not fit are split the same
  way, one level down;
- the cache invariant of both: a call that starts at position p (an edge) or sits on a
  prefix p (a pack) finds positions [0, p) of the cache holding exactly its path.
"""


class Node:
    __slots__ = ("start", "end", "children", "outs", "ref")

    def __init__(self, start, end):
        self.start, self.end = start, end
        self.children = []
        self.outs = []  # (row, k, position of the scored token, the token)
        self.ref = 0


def build_tree(prep):
    """Radix tree over the sequences of prep [(seq, ctx_len, a, b)]. A node holds the
    tokens [start, end) shared by its rows (node.ref is one of them) and the scored tokens
    (outs) whose predicting position lies in its range."""
    if not prep:
        return None
    root = None
    todo = [(list(range(len(prep))), 0, None)]  # (rows, depth they share, parent)
    while todo:
        idx, depth, parent = todo.pop()
        seqs = [prep[i][0] for i in idx]
        first = seqs[0]
        if len(seqs) == 1:
            lcp = len(first)
        else:
            end = min(len(s) for s in seqs)
            lcp = depth
            while lcp < end:
                t = first[lcp]
                if any(s[lcp] != t for s in seqs):
                    break
                lcp += 1
        node = Node(depth, lcp)
        node.ref = idx[0]
        for i in idx:
            seq, cl, a, b = prep[i]
            lo, hi = max(depth, cl + a - 1), min(lcp, cl + b - 1)
            for p in range(lo, hi):
                node.outs.append((i, p - (cl + a - 1), p, seq[p + 1]))
        if parent is None:
            root = node
        else:
            parent.children.append(node)
        groups = {}
        for i in idx:
            s = prep[i][0]
            if len(s) > lcp:
                groups.setdefault(s[lcp], []).append(i)
        # Pushed in reverse so that children are built (and appended) in first-seen order.
        for g in reversed(list(groups.values())):
            todo.append((g, lcp, node))
    return root


def useful(node):
    return node.end > node.start and bool(node.outs or node.children)


def preorder(node):
    """The nodes under node (itself included) in pre-order, iteratively."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(reversed(n.children))
    return out


def subtree_tokens(root):
    """{id(node): tokens its subtree forwards}, iteratively (children before parents)."""
    size = {}
    for n in reversed(preorder(root)):
        size[id(n)] = (n.end - n.start if useful(n) else 0) + sum(size[id(c)] for c in n.children)
    return size


class Plan:
    """Model calls and their indices. ints/floats are the two arrays uploaded once; a call
    refers to slices of them by offset. calls: ("edge", start, end, tok_off, outs_at) or
    ("pack", prefix, n_tokens, tok_off, pos_off, node_off, n_nodes, anc_off, outs_at), where
    outs_at = (n_unique, pos_off, n_outs, sel_off) indexes the call's scored positions."""

    def __init__(self):
        self.ints = []
        self.calls = []
        self.outs = []  # (row, k) of every scored token, in call order
        self.targets = []  # the scored tokens, in the same order
        self.temps = []  # each scored token's temperature
        self.tokens_forwarded = 0
        self.packs = 0
        self.max_pack_tokens = 0
        self.needs_cache = False  # a call reads or leaves a path in the key/value cache

    def finish(self):
        """Appends the scored tokens to ints (at target_off); the plan is complete."""
        self.target_off = self._put(self.targets)
        return self

    def _put(self, values):
        off = len(self.ints)
        self.ints.extend(values)
        return off

    def _outs(self, outs, index_of, temps):
        """Registers the scored tokens of one call; index_of(out) is the row of the call's
        hidden states that predicts it."""
        uniq = sorted({index_of(o) for o in outs})
        where = {p: j for j, p in enumerate(uniq)}
        pos_off = self._put(uniq)
        sel_off = self._put([where[index_of(o)] for o in outs])
        for o in outs:
            self.outs.append((o[0], o[1]))
            self.targets.append(o[3])
            self.temps.append(temps[o[0]])
        return (len(uniq), pos_off, len(outs), sel_off)

    def edge(self, prep, node, start, end, temps):
        outs = [o for o in node.outs if start <= o[2] < end]
        tok_off = self._put(prep[node.ref][0][start:end])
        self.needs_cache = True
        self.calls.append(("edge", start, end, tok_off, self._outs(outs, lambda o: o[2] - start, temps)
                           if outs else None))
        self.tokens_forwarded += end - start

    def pack(self, prep, prefix, tops, temps, top_children=None):
        """One call of the subtrees under tops on the cached path [0, prefix). top_children:
        with one top, the only children of it the pack holds (the others follow later, on
        the cache of the top's path, which the pack leaves at [prefix, top.end))."""
        nodes, parent = [], []
        for top in tops:
            local = {}
            order = [top] + [n for c in (top.children if top_children is None else top_children)
                             for n in preorder(c)]
            for n in order:
                if not useful(n):
                    continue
                local[id(n)] = len(nodes)
                nodes.append(n)
                parent.append(-1)
            for n in order:
                for c in n.children:
                    if id(c) in local and id(n) in local:
                        parent[local[id(c)]] = local[id(n)]
        toks, pos, node_of, offset = [], [], [], []
        for i, n in enumerate(nodes):
            offset.append(len(toks))
            toks.extend(prep[n.ref][0][n.start:n.end])
            pos.extend(range(n.start, n.end))
            node_of.extend([i] * (n.end - n.start))
        if not toks:
            return
        # anc[i][j]: node j is node i or one of its ancestors inside the pack (parents first).
        anc = []
        for i in range(len(nodes)):
            row = list(anc[parent[i]]) if parent[i] >= 0 else [0] * len(nodes)
            row[i] = 1
            anc.append(row)
        outs, at = [], {}
        for i, n in enumerate(nodes):
            for o in n.outs:
                outs.append(o)
                at[id(o)] = offset[i] + o[2] - n.start
        if prefix > 0 or top_children is not None:
            self.needs_cache = True
        tok_off = self._put(toks)
        pos_off = self._put(pos)
        node_off = self._put(node_of)
        anc_off = self._put([v for row in anc for v in row])
        self.calls.append(("pack", prefix, len(toks), tok_off, pos_off, node_off, len(nodes), anc_off,
                           self._outs(outs, lambda o: at[id(o)], temps) if outs else None))
        self.tokens_forwarded += len(toks)
        self.packs += 1
        self.max_pack_tokens = max(self.max_pack_tokens, len(toks))


def plan_walk(prep, root, temps):
    p = Plan()
    stack = [root]
    while stack:  # depth-first; a node's cache prefix is exactly its parent's path
        node = stack.pop()
        if useful(node):
            p.edge(prep, node, node.start, node.end, temps)
        stack.extend(reversed(node.children))
    return p.finish()


def plan_tree(prep, root, temps, pack_tokens):
    if pack_tokens < 1:
        raise ValueError(f"pack_tokens must be >= 1, got {pack_tokens}")
    p = Plan()
    size = subtree_tokens(root)
    stack = [root]
    while stack:
        node = stack.pop()
        small = [c for c in node.children if 0 < size[id(c)] <= pack_tokens]
        big = [c for c in node.children if size[id(c)] > pack_tokens]
        groups, cur, n = [], [], 0
        for c in small:  # whole subtrees, in order, up to pack_tokens per call
            if cur and n + size[id(c)] > pack_tokens:
                groups.append(cur)
                cur, n = [], 0
            cur.append(c)
            n += size[id(c)]
        if cur:
            groups.append(cur)
        T = node.end - node.start if useful(node) else 0
        if T and T + (sum(size[id(c)] for c in groups[0]) if groups else 0) <= pack_tokens:
            # The node's edge and its first group in one pack: the edge comes first, so the
            # pack leaves the node's path in the cache for the rest.
            p.pack(prep, node.start, [node], temps, groups[0] if groups else [])
            groups = groups[1:]
        elif T:  # the node's own edge, in chunks, on the cache of its path
            for s in range(node.start, node.end, pack_tokens):
                e = min(node.end, s + pack_tokens)
                p.edge(prep, node, s, e, temps)
                p.packs += 1
                p.max_pack_tokens = max(p.max_pack_tokens, e - s)
        for g in groups:
            p.pack(prep, node.end, g, temps)
        stack.extend(reversed(big))
    return p.finish()
