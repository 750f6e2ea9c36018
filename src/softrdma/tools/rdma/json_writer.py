"""iproute2's lib/json_writer.c: the JSON ``rdma -j [-p]`` prints, written
as it goes (no document built first), with its separators and its pretty
layout."""

from __future__ import annotations


def _jquote(s: str) -> str:
    out = ['"']
    for ch in s:
        out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f", "\b": "\\b", "\\": "\\\\",
                    '"': '\\"'}.get(ch, ch))
    out.append('"')
    return "".join(out)


class JsonWriter:
    def __init__(self, write, pretty: bool):
        self.write = write
        self.pretty = pretty
        self.depth = 0
        self.sep = ""

    def _eol(self):
        if self.pretty:
            self.write("\n" + "    " * self.depth)

    def _eor(self):
        if self.sep:
            self.write(self.sep)
        self.sep = ","

    def _begin(self, c):
        self._eor()
        self.write(c)
        self.depth += 1
        self.sep = ""

    def _end(self, c):
        self.depth -= 1
        if self.sep:
            self._eol()
        self.write(c)
        self.sep = ","

    def name(self, name: str):
        self._eor()
        self._eol()
        self.sep = ""
        self.write(_jquote(name) + (": " if self.pretty else ":"))

    def value(self, v):
        self._eor()
        if isinstance(v, bool):
            self.write("true" if v else "false")
        elif isinstance(v, int):
            self.write(str(v))
        else:
            self.write(_jquote(str(v)))

    def start_object(self):
        self._begin("{")

    def end_object(self):
        self._end("}")

    def start_array(self):
        self._begin("[")
        if self.pretty:
            self.write(" ")

    def end_array(self):
        if self.pretty and self.sep:
            self.write(" ")
        self.sep = ""
        self._end("]")
