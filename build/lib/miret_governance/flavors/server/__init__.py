"""`govern server setup`: the permissions of a shared MLflow server, set from the policy's roles."""
