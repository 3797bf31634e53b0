"""What a configuration renders besides the CDK stacks, shared by the stacks and the operator's
tools: the Kubernetes layer's values and plan, the canary run, the fabric checks and the pipeline's
deployment check, the review files and the cost floor. Imports config, k8s_charts and cluster_facts.
"""
