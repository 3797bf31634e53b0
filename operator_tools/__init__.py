"""The operator's command-line tools, one entry point per ``make`` target (``make canary``,
``make outdated``, ``make timeline``, ``make runs``, the review comment) and the models behind
them. Imports cluster_plan, config, k8s_charts and cluster_facts; never the stacks.
"""
