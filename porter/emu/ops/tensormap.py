"""placeholder"""
BUILDERS = {}
FORMS = []
