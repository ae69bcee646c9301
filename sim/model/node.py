"""A node of the radix tree: a run of page keys and the state it holds in each tier."""

from __future__ import annotations

Points = dict[int, int]
"""Where a node holds one aux pool's state: absolute page index of each resume point -> the
device units kept for it (SWA: the window's pages not already counted; Mamba: one slot)."""


class Node:
    """A run of pages in the tree (SGLang: TreeNode).

    Its KV pages live on the device (`on_device`) and, in `cache` host mode, possibly on the
    host (`on_host`). `resident_aux` maps each aux pool whose state the node holds on the device
    to `None` (values for every page) or to its resume points; state is dropped ("tombstoned")
    under pool pressure while the KV stays. `host_aux` says its host copy carries every aux
    pool's state too.
    """

    __slots__ = (
        "alive",
        "backed_up",
        "children",
        "end",
        "host_aux",
        "last_access_s",
        "lock_ref",
        "nid",
        "on_device",
        "on_host",
        "pages",
        "parent",
        "resident_aux",
        "start",
    )

    def __init__(self, nid: int, pages: list[int], parent: Node | None, start: int) -> None:
        self.nid = nid
        self.pages = pages
        self.parent = parent
        self.start = start
        self.end = start + len(pages)
        """Absolute page index just past this node's last page. It never moves: a split keeps
        the lower half in this node (its pages and start change, not its end)."""
        self.children: dict[int, Node] = {}
        self.lock_ref = 0
        self.last_access_s = 0.0
        self.on_device = False
        self.on_host = False
        self.host_aux = False
        self.resident_aux: dict[str, Points | None] = {}
        self.backed_up = False
        self.alive = True

    @property
    def last_page(self) -> int:
        return self.pages[-1]

    def __repr__(self) -> str:
        return f"Node({self.nid}, [{self.start}:{self.end}), dev={self.on_device})"
