"""One task's episodes on one vector env.

The per-slot loop (``loop``) and how and when the policy is called (``inference``).
"""
