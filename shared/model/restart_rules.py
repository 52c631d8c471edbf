"""Whether an exited container runs again, as the kubelet 1.37 decides it (ContainerRestartRules,
on by default since 1.35; pkg/api/v1/pod ContainerShouldRestart): the container's
restartPolicyRules first, in order, then its own restartPolicy, then the pod's. pod-sync
restarts by it and status-reporter's phase counts by it, so the two never disagree."""

from __future__ import annotations

from shared.model.podspec import Container, ContainerRestartRule, Pod


def matching_rule(c: Container, exit_code: int) -> ContainerRestartRule | None:
    """The first of the container's rules its exit code matches."""
    for rule in c.restartPolicyRules:
        if rule.exitCodes is None:
            continue
        listed = exit_code in rule.exitCodes.values
        if listed == (rule.exitCodes.operator == "In"):
            return rule
    return None


def should_restart(pod: Pod, c: Container, exit_code: int) -> bool:
    if c.restartPolicy is not None:
        rule = matching_rule(c, exit_code)
        if rule is not None and rule.action == "Restart":
            return True
        return c.restartPolicy == "Always" or (c.restartPolicy == "OnFailure" and exit_code != 0)
    policy = pod.spec.restartPolicy
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def runs_once(pod: Pod, c: Container) -> bool:
    """A container that, once it has succeeded, is not started again in a new sandbox (OnFailure,
    its own or else the pod's)."""
    return (c.restartPolicy or pod.spec.restartPolicy) == "OnFailure"
