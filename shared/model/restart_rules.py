"""Whether an exited container runs again, as the kubelet 1.37 decides it (ContainerRestartRules,
on by default since 1.35; pkg/api/v1/pod ContainerShouldRestart): the container's
restartPolicyRules first, in order, then its own restartPolicy, then the pod's. pod-sync
restarts by it and status-reporter's phase counts by it, so the two never disagree.

A rule's action RestartAllContainers (RestartAllContainersOnContainerExits, on by default since
1.36) restarts the container too, and with it every other container of the pod, init containers
first (services/pod_sync/actions.py)."""

from __future__ import annotations

from shared.model.podspec import Container, ContainerRestartRule, Pod

# The kubelet's waiting reason of a container stopped by a RestartAllContainers rule until it
# runs again; such a container is on its way back whatever its exit code.
RESTARTING_ALL = "RestartingAllContainers"


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
        if rule is not None:
            return True  # Restart, or RestartAllContainers
        return c.restartPolicy == "Always" or (c.restartPolicy == "OnFailure" and exit_code != 0)
    policy = pod.spec.restartPolicy
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def runs_once(pod: Pod, c: Container) -> bool:
    """A container that, once it has succeeded, is not started again in a new sandbox (OnFailure,
    its own or else the pod's)."""
    return (c.restartPolicy or pod.spec.restartPolicy) == "OnFailure"


def restarts_all(c: Container, exit_code: int) -> bool:
    """The exit matches one of the container's rules whose action is RestartAllContainers."""
    rule = matching_rule(c, exit_code) if c.restartPolicy is not None else None
    return rule is not None and rule.action == "RestartAllContainers"


def could_restart_all(pod: Pod) -> bool:
    """Some container of the pod has a RestartAllContainers rule (the kubelet then reports the
    AllContainersRestarting condition)."""
    return any(rule.action == "RestartAllContainers"
               for c in pod.spec.initContainers + pod.spec.containers for rule in c.restartPolicyRules)
