"""Plan and diff a port: the porting plan (``plan``), generated-source diffs labelled by
feature (``srcdiff``) and the bring-up runbooks (``runbook``).
"""
