"""Quota requests: a `QuotaRequest` becomes a pull request on the policy repository.

In a GitOps shop the approval flow is a pull request: the merge is the
approval. Rooms: `request` (the custom resource, read; its status), `edit`
(the minimal edit of a policy file), `forge` (GitHub, GitLab and Gitea behind
one small interface), `branch` (the branch pushed to the policy repository),
`body` (what reviewers read), `controller` (the loop).
"""
