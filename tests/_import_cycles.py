"""Import cycles between the modules of a package, function-level imports included.

``python tests/_import_cycles.py [package] [src]`` prints every cycle (strongly
connected component of the module import graph) and exits 1 when there is one.
The graph comes from grimp, which reads every import statement of a module,
those inside function bodies too, so a cycle cannot hide behind a lazy import.
"""

from __future__ import annotations

import sys


def import_cycles(package, src=None):
    """Strongly connected components of more than one module, each sorted, sorted.

    Parameters
    ----------
    package : str
        Top-level package whose modules are read.
    src : str, optional
        Folder to put first on ``sys.path`` (where ``package`` lives).

    Returns
    -------
    cycles : list of list of str
    """
    import grimp

    if src is not None:
        sys.path.insert(0, str(src))
    graph = grimp.build_graph(package, cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    return _strongly_connected(edges)


def _strongly_connected(edges):
    """Tarjan's algorithm, iterative (no recursion limit on long import chains)."""
    index, low, on_stack, stack, cycles = {}, {}, set(), [], []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return sorted(cycles)


if __name__ == "__main__":
    found = import_cycles(
        sys.argv[1] if len(sys.argv) > 1 else "mbkkm", sys.argv[2] if len(sys.argv) > 2 else "src"
    )
    for cycle in found:
        print(" <-> ".join(cycle))
    print(f"{len(found)} import cycles")
    sys.exit(1 if found else 0)
