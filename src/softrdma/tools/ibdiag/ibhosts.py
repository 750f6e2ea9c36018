"""``ibhosts``, ``ibswitches``, ``ibnodes`` (infiniband-diags 44's shell
scripts): ibnetdiscover's topology (or a topology file) turned into one
line per CA / switch with the scripts' awk rules.  Options as the
scripts take them: ``[-h] [<topology-file> | -y mkey -C ca_name -P
ca_port -t timeout_ms]``; bad ones print the usage and exit 255.
"""

from __future__ import annotations

import re
import sys

from . import common, ibnetdiscover


def _comment(line):
    m = re.search(r"#[ \t]*", line)
    return line[m.end():] if m else ""


def hosts(text):
    out = []
    for line in text.splitlines():
        if line.startswith("Ca"):
            f = line.split()
            out.append(f"{f[0]}\t: 0x{f[2][3:19]} ports {f[1]} {_comment(line)}\n")
    return "".join(out)


def switches(text):
    out = []
    for line in text.splitlines():
        if not line.startswith("Switch"):
            continue
        f = line.split()
        desc = _comment(line)
        pi = desc.find("port 0")
        pinfo = desc[pi:] if pi >= 0 else ""
        desc = desc[:pi - 1] if pi > 0 else ""
        out.append(f"{f[0]}\t: 0x{f[2][3:19]} ports {f[1]} {desc} {pinfo}\n")
    return "".join(out)


def main(argv, prog="ibhosts") -> int:
    def usage():
        sys.stdout.write(f"Usage: {prog} [-h] [<topology-file> | -y mkey -C ca_name -P ca_port "
                         f"-t timeout_ms]\n")
        return 255

    def body():
        topo, passthru, i = None, [], 0
        while i < len(argv):
            a = argv[i]
            if a in ("-h", "--help"):
                return usage()
            if a in ("-y", "--m_key", "-P", "--Port", "-C", "--Ca", "-t", "--timeout"):
                if i + 1 >= len(argv) or argv[i + 1].startswith("-") or not argv[i + 1]:
                    return usage()
                passthru += [a, argv[i + 1]]
                i += 2
                continue
            if a.startswith("-"):
                return usage()
            if topo:
                return usage()
            topo = a
            i += 1
        if topo:
            try:
                text = open(topo).read()
            except OSError as e:
                sys.stderr.write(f"cat: {topo}: {e.strerror}\n")
                text = ""
        else:
            rc, text = ibnetdiscover.render(passthru, "ibnetdiscover")
        if prog == "ibswitches":
            sys.stdout.write(switches(text))
        elif prog == "ibnodes":
            sys.stdout.write(hosts(text) + switches(text))
        else:
            sys.stdout.write(hosts(text))
        return 0
    return common.run(prog, body)
