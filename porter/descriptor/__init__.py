"""The arch descriptor: loading and checking it (``arch``, ``arch_schema``), comparing two
(``archdiff``) and proving its claims with probe compiles (``probes``).
"""
