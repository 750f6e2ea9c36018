"""``softrdma fabric show``: a picture (or a text) of a fabric's topology.

Owns three steps, each usable alone:

* ``snapshot(fabric)``: what is drawn -- nodes (nodeid, switch or not),
  links with each end's logical state and the data it sent (PortXmitData),
  and the CA ports with an IB device attached (and the device's name);
  the same JSON a running server writes for ``dumpstate PATH``;
* ``layout(snap)``: pure geometry -- tiers by BFS distance from the CAs
  (hosts 0, leaves 1, spines/cores above), each tier ordered by the mean
  position of its neighbours below (fewer crossings);
* ``draw_png`` (matplotlib, optional: ``pip install softrdma[fabric]``) and
  ``text``.  Fabrics with many hosts draw them as one "N hosts" label per
  leaf, so 4096-host trees stay readable and fast.
"""

from __future__ import annotations

from collections import defaultdict, deque

from ..wire.smp import PortState
from .model import PC_XMIT_DATA

STATE_NAMES = {int(s): s.name.title() for s in PortState}
STATE_COLORS = {"Active": "#2e7d32", "Armed": "#f9a825", "Init": "#1565c0", "Down": "#c62828"}
AGGREGATE_HOSTS = 256
TEXT_LINKS = 40                # links not Active listed by --text          # above this many CAs, hosts are drawn as one label per leaf


def snapshot(fabric) -> dict:
    nodes = [[n.nodeid, bool(n.is_switch)] for n in fabric.nodes]
    links = []
    for a, b in fabric.links():
        links.append([a.node.index, a.num, b.node.index, b.num, STATE_NAMES.get(int(a.state), "?"),
                      STATE_NAMES.get(int(b.state), "?"),
                      (a.pc[PC_XMIT_DATA] if a.pc else 0) + (b.pc[PC_XMIT_DATA] if b.pc else 0)])
    devices = sorted([p.node.index, p.num, name] for p, name in fabric.devices.items())
    return {"nodes": nodes, "links": links, "devices": devices}


def link_state(link) -> str:
    """A link is as good as its worse end."""
    order = ["Down", "Init", "Armed", "Active"]
    a, b = link[4], link[5]
    return min((a, b), key=lambda s: order.index(s) if s in order else -1)


def layout(snap: dict) -> tuple[dict[int, int], dict[int, float]]:
    """(tier of each node, x position in [0, 1] within its tier)."""
    nodes, links = snap["nodes"], snap["links"]
    adj: dict[int, list[int]] = defaultdict(list)
    for a, _, b, _, *_ in links:
        adj[a].append(b)
        adj[b].append(a)
    tier: dict[int, int] = {}
    q = deque()
    for i, (_, is_sw) in enumerate(nodes):
        if not is_sw:
            tier[i] = 0
            q.append(i)
    if not q and nodes:                          # no CAs: start at the first node
        tier[0] = 0
        q.append(0)
    while q:
        n = q.popleft()
        for m in adj[n]:
            if m not in tier:
                tier[m] = tier[n] + 1
                q.append(m)
    for i in range(len(nodes)):                  # unconnected switches: one tier above all
        tier.setdefault(i, (max(tier.values()) + 1) if tier else 0)
    by_tier: dict[int, list[int]] = defaultdict(list)
    for i in range(len(nodes)):
        by_tier[tier[i]].append(i)
    x: dict[int, float] = {}
    for t in sorted(by_tier):
        members = by_tier[t]
        if t > 0:
            def bary(i):
                below = [x[m] for m in adj[i] if tier.get(m) == t - 1 and m in x]
                return (sum(below) / len(below) if below else 0.5, i)
            members.sort(key=bary)
        k = len(members)
        for pos, i in enumerate(members):
            x[i] = (pos + 0.5) / k
    return tier, x


def text(snap: dict) -> str:
    tier, _ = layout(snap)
    nodes, links = snap["nodes"], snap["links"]
    out = []
    for t in sorted(set(tier.values()), reverse=True):
        members = [nodes[i][0] for i in range(len(nodes)) if tier[i] == t]
        kind = "hosts" if t == 0 else f"tier {t}"
        out.append(f"{kind} ({len(members)}): " + " ".join(members[:12]) + (" ..." if len(members) > 12 else ""))
    counts: dict[str, int] = defaultdict(int)
    for ln in links:
        counts[link_state(ln)] += 1
    out.append(f"links: {len(links)} (" + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")")
    bad = [ln for ln in links if link_state(ln) != "Active"]
    for ln in bad[:TEXT_LINKS]:
        out.append(f'  {link_state(ln):6} "{nodes[ln[0]][0]}"[{ln[1]}] <-> "{nodes[ln[2]][0]}"[{ln[3]}]')
    if len(bad) > TEXT_LINKS:
        out.append(f"  ... and {len(bad) - TEXT_LINKS} more not Active")
    devices = snap.get("devices", [])
    if devices:
        out.append(f"IB devices attached: {len(devices)}")
    for i, num, name in devices[:TEXT_LINKS]:
        out.append(f'  "{nodes[i][0]}"[{num}] {name or "?"}')
    if len(devices) > TEXT_LINKS:
        out.append(f"  ... and {len(devices) - TEXT_LINKS} more")
    return "\n".join(out) + "\n"


def draw_png(snap: dict, path: str, color: str = "state", title: str = "") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    tier, x = layout(snap)
    nodes, links = snap["nodes"], snap["links"]
    ncas = sum(1 for _, sw in nodes if not sw)
    aggregate = ncas > AGGREGATE_HOSTS
    top = max(tier.values()) if tier else 0
    fig, ax = plt.subplots(figsize=(14, 2.2 * (top + 1) + 1.5), dpi=100)
    segs, cols, loads = [], [], []
    hosts_below: dict[int, int] = defaultdict(int)
    attached: dict[int, str] = {}                # hosts with an IB device (green)
    for i, num, name in snap.get("devices", []):
        attached[i] = f"{name}" if num == 1 else f"{name} port {num}"
    for ln in links:
        a, b = ln[0], ln[2]
        if aggregate and (tier[a] == 0 or tier[b] == 0):
            hosts_below[b if tier[a] == 0 else a] += 1
            continue
        segs.append([(x[a], tier[a]), (x[b], tier[b])])
        cols.append(STATE_COLORS.get(link_state(ln), "#9e9e9e"))
        loads.append(ln[6])
    if color == "load" and segs:
        lc = LineCollection(segs, array=loads, cmap="viridis", linewidths=0.8)
        fig.colorbar(lc, ax=ax, label="PortXmitData (both ends, 4-byte words)")
    else:
        lc = LineCollection(segs, colors=cols, linewidths=0.6 if len(segs) > 2000 else 1.2)
        from matplotlib.lines import Line2D
        ax.legend(handles=[Line2D([0], [0], color=c, label=s) for s, c in STATE_COLORS.items()],
                  loc="upper right", fontsize=8)
    ax.add_collection(lc)
    down = [sg for sg, c in zip(segs, cols) if c == STATE_COLORS["Down"]]
    if down and color == "state":                # drawn again on top: one bad cable must show
        ax.add_collection(LineCollection(down, colors=STATE_COLORS["Down"], linewidths=2.5, zorder=2))
    for t in range(top + 1):
        members = [i for i in range(len(nodes)) if tier[i] == t]
        if t == 0 and aggregate:
            continue
        ax.scatter([x[i] for i in members], [t] * len(members), s=4 if len(members) > 400 else 30,
                   c=["#2e7d32" if i in attached else "#424242" if t else "#757575" for i in members],
                   marker="s" if t else "o", zorder=3)
        if len(members) <= 40:
            for i in members:
                label = nodes[i][0] + (f" ({attached[i]})" if i in attached else "")
                ax.annotate(label, (x[i], t), textcoords="offset points", xytext=(0, 6), ha="center",
                            fontsize=6)
    if aggregate:
        for i, n in hosts_below.items():
            ax.annotate(f"{n}", (x[i], tier[i]), textcoords="offset points", xytext=(0, -10), ha="center",
                        fontsize=5, color="#616161")
    ax.set_yticks(range(top + 1))
    ax.set_yticklabels(["hosts" if t == 0 else ("leaves" if t == 1 else f"tier {t}") for t in range(top + 1)])
    ax.set_xticks([])
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.6 if not aggregate else 0.5, top + 0.5)
    nsw = sum(1 for _, sw in nodes if sw)
    ax.set_title(title or f"{nsw} switches, {ncas} hosts, {len(links)} links"
                 + (" (hosts counted under their leaf)" if aggregate else ""))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


__all__ = ["snapshot", "layout", "text", "draw_png", "link_state"]
