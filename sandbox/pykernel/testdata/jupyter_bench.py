"""Drives a real Jupyter kernel (ipykernel through jupyter_client) for the
benchmarks in bench_test.go, so that Go times only what it asks for.

One command per stdin line, one answer line on stdout:
  start        start a kernel and wait until it answers  -> "ok"
  exec CODE    execute CODE (\\n escaped as \\\\n), wait for execute_reply -> "ok STATUS"
  stop         shut the kernel down                      -> "ok"
"""
import sys

from jupyter_client.manager import KernelManager

km = kc = None
for line in sys.stdin:
    cmd, _, arg = line.rstrip("\n").partition(" ")
    if cmd == "start":
        km = KernelManager(kernel_name="python3")
        km.start_kernel()
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        print("ok", flush=True)
    elif cmd == "exec":
        msg_id = kc.execute(arg.replace("\\n", "\n"))
        while True:
            reply = kc.get_shell_msg(timeout=60)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        print("ok", reply["content"]["status"], flush=True)
    elif cmd == "stop":
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        km = kc = None
        print("ok", flush=True)
    else:
        print("error unknown command", cmd, flush=True)
