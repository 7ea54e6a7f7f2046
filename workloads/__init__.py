"""Pure, picklable workloads and their registry (no Tornado in here).

Import what you need from workloads.registry or workloads.params: this file
stays empty so that the param parser (used by the embedded upstream) does not
drag in numpy and scikit-learn.
"""
