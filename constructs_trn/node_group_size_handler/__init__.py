"""The Lambda function of constructs_trn/node_group_size.py (its code asset is this directory)."""
