"""`lerobench serve`: a policy over openpi's websocket protocol."""

from __future__ import annotations

import typer

from lerobench.cli.common import app, console, err_console, fail
from lerobench.errors import LerobenchError


@app.command("serve", short_help="Serve a policy over openpi's websocket protocol.")
def serve_policy(
    policy: str = typer.Option(..., "--policy", "-p", help="Policy to serve: any --policy of `lerobench eval`."),
    suite: str = typer.Option(..., "--suite", "-s", help="Suite whose shapes and cameras the policy is built for."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, "--port", help="TCP port (0: any free port)."),
    protocol: str = typer.Option("standard", "--protocol", help="Named protocol of the suite (image size)."),
    seed: int = typer.Option(0, "--seed", help="Run seed given to the policy factory."),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda | cuda:N | auto (for torch policies)."),
    call_width: int | None = typer.Option(
        None, "--call-width", min=0, help="Rows per call of a torch policy, padded (default: 8 cpu, 16 cuda)."),
    max_batch: int = typer.Option(1, "--max-batch", help="Stack up to N rows of concurrent requests into one "
                                  "policy call (1: no batching; the policy must declare batchable = True)."),
    max_wait_ms: float = typer.Option(5.0, "--max-wait-ms", help="With --max-batch: wait at most T ms after a "
                                      "batch's first request for more."),
) -> None:
    """Serve a policy over openpi's websocket protocol (for `eval --policy ws://...` or openpi clients)."""
    try:
        from lerobench.policies.serve import PolicyServer, suite_context

        context = suite_context(suite, protocol, seed=seed, device=device, call_width=call_width)
        server = PolicyServer(policy, context, host, port,
                              on_event=lambda text: err_console.print(f"[dim]{text}[/]", highlight=False),
                              max_batch=max_batch, max_wait_ms=max_wait_ms, protocol=protocol)
    except LerobenchError as exc:
        fail(exc)
    if host not in ("127.0.0.1", "localhost", "::1"):
        err_console.print(f"[yellow]listening on {host}: anyone who reaches this port can run the policy "
                          f"(no authentication, no encryption)[/]", highlight=False)
    console.print(f"Serving [bold]{policy}[/] for suite [bold]{context.suite}[/] on [bold]{server.url}[/]"
                  + (f", batching up to {max_batch} rows within {max_wait_ms:g} ms" if max_batch > 1 else "")
                  + " (Ctrl-C to stop)", highlight=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        console.print("stopped")
    finally:
        server.shutdown()
