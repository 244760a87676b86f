"""Compile and disassemble: render Jinja2 templates (``render``), NVRTC from the pip wheels
(``toolchain``), nvdisasm / cuobjdump output read (``sass``).
"""
