"""NVIDIA's firmware tools (MFT / mstflint) for softrdma's ConnectX-like
devices: ``mst``, ``mlxconfig``, ``flint``, ``mlxfwreset`` -- their
commands, prompts, output and ``-E-`` errors (docs/formats/mst.md,
mlxconfig.md, flint.md).  ``common`` holds what they share: the MST device
names, finding a device by any name the tools take, the y/n prompt."""
