"""The fast paths: the same answers as the core, in fewer statements and less CPU.

Each module here says in its first line which core function it must agree with,
plugs in at one seam (a setting), and has a test that runs the core and the fast
path on the same cases and compares the rows and the bytes. The shipped settings
(production and the demo) turn every fast path on; with them off, the core alone
serves every request correctly. The core never imports this package.
"""
