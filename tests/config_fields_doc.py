"""The table of every KubeletConfiguration field and its state in pykubelet, generated from the
code (shared.config.settings, shared.config.refused) into docs/kubelet-config-fields.md:

    .venv/bin/python -m tests.config_fields_doc > docs/kubelet-config-fields.md

tests/unit/test_config_fields.py fails when the file is not what this prints, or when a test
named here does not exist."""

from __future__ import annotations

from shared.config.flags import FLAGS, REFUSED_PARTS
from shared.config.refused import FIELDS, REFUSED, shown
from shared.config.settings import KubeletConfiguration

# The test that shows each implemented field's effect: "effect" (the field is set where a node
# or the code under test reads it, and its effect observed), "direct" (the value is handed to
# the component the field configures and its effect observed), "parse" (only its validation is
# tested), "unused" (checked; the kubelet 1.37 checks it too and it changes nothing there, nor
# here), "one-numa" (checked; it changes nothing on a host with one NUMA node, the only kind
# pykubelet runs topology policies on, in the kubelet either), "none".
TESTS: dict[str, tuple[str, str | None]] = {
    "enableServer": ("effect", "tests/security_modes/test_file_modes.py::test_enable_server_false_runs_the_node_without_the_kubelet_api"),
    "address": ("effect", "tests/integration/test_services.py::test_the_kubelet_api_listens_where_address_and_read_only_port_say"),
    "port": ("effect", "tests/cluster/test_node_api.py::test_no_credentials_is_401"),
    "readOnlyPort": ("effect", "tests/integration/test_services.py::test_the_kubelet_api_listens_where_address_and_read_only_port_say"),
    "tlsCertFile": ("effect", "tests/security/test_kubelet_api_tls.py::test_the_kubelet_api_shows_the_tls_cert_file_and_speaks_tls13_only"),
    "tlsPrivateKeyFile": ("effect", "tests/security/test_kubelet_api_tls.py::test_the_kubelet_api_shows_the_tls_cert_file_and_speaks_tls13_only"),
    "tlsCurvePreferences": ("effect", "tests/cluster/test_node_api.py::test_the_kubelet_api_agrees_only_the_configured_curve"),
    "tlsCipherSuites": ("effect", "tests/cluster/test_node_api.py::test_tls12_clients_get_only_the_configured_cipher_suites"),
    "tlsMinVersion": ("effect", "tests/security/test_kubelet_api_tls.py::test_the_kubelet_api_shows_the_tls_cert_file_and_speaks_tls13_only"),
    "authentication": ("effect", "tests/cluster/test_node_api.py::test_rbac_decides_per_subresource"),
    "authorization": ("effect", "tests/cluster/test_node_api.py::test_rbac_decides_per_subresource"),
    "imageServiceEndpoint": ("effect", "tests/integration/test_image_service_endpoint.py::test_the_image_calls_go_to_the_image_service_endpoint"),
    "enableDebuggingHandlers": ("effect", "tests/cpu_manager/test_node_settings.py::test_the_kubelet_api_has_no_debugging_handlers"),
    "enableProfilingHandler": ("effect", "tests/cluster/test_node_api.py::test_running_pods_and_the_disabled_profiling_endpoint_answer_as_the_kubelets"),
    "enableDebugFlagsHandler": ("effect", "tests/cluster/test_node_api.py::test_debug_flags_v_sets_the_log_verbosity_of_every_service"),
    "streamingConnectionIdleTimeout": ("effect", "tests/cluster/test_node_api.py::test_a_stream_that_carries_nothing_is_closed_after_the_idle_timeout"),
    "staticPodPath": ("effect", "tests/integration/test_static_pods.py::test_web_pod_answers_http_at_its_ip"),
    "podLogsDir": ("effect", "tests/integration/test_lifecycle.py::test_container_logs_are_rotated"),
    "podCIDR": ("effect", "tests/integration/test_services.py::test_network_service_wrote_cni_config_and_reports_ready"),
    "clusterDNS": ("effect", "tests/security/test_pod_isolation.py::test_a_cluster_first_pod_gets_the_cluster_dns_and_domain"),
    "clusterDomain": ("effect", "tests/security/test_pod_isolation.py::test_a_cluster_first_pod_gets_the_cluster_dns_and_domain"),
    "containerRuntimeEndpoint": ("effect", "tests/integration/test_static_pods.py::test_web_pod_answers_http_at_its_ip"),
    "syncFrequency": ("effect", "tests/cpu_manager/test_node_settings.py::test_running_pods_are_synced_every_sync_frequency"),
    "cpuManagerPolicy": ("effect", "tests/cpu_manager/test_cpu_sets.py::test_exclusive_cpus_and_the_shared_pool"),
    "reservedSystemCPUs": ("effect", "tests/cpu_manager/test_cpu_sets.py::test_exclusive_cpus_and_the_shared_pool"),
    "cpuManagerReconcilePeriod": ("effect", "tests/cpu_manager/test_cpu_sets.py::test_exclusive_cpus_and_the_shared_pool"),
    "configMapAndSecretChangeDetectionStrategy": ("effect", "tests/multinode/test_change_detection.py::test_each_node_finds_a_config_map_change_its_own_way"),
    "runOnce": ("unused", "tests/unit/test_config_fields.py::test_fields_of_the_kubelets_default_feature_gates_are_checked_as_it_checks_them"),
    "defaultPodSysctls": ("unused", "tests/unit/test_config_fields.py::test_fields_of_the_kubelets_default_feature_gates_are_checked_as_it_checks_them"),
    "qosReserved": ("unused", "tests/unit/test_config_fields.py::test_fields_of_the_kubelets_default_feature_gates_are_checked_as_it_checks_them"),
    "topologyManagerPolicyOptions": ("one-numa", "tests/unit/test_cpu_manager.py::test_topology_manager_policy_options_are_checked_with_the_kubelets_words"),
    "makeIPTablesUtilChains": ("effect", "tests/integration/test_services.py::test_the_kubelets_iptables_util_chains_are_made"),
    "iptablesMasqueradeBit": ("unused", "tests/unit/test_iptables_chains.py::test_the_iptables_bits_are_checked_as_the_kubelet_checks_them"),
    "showHiddenMetricsForVersion": ("unused", "tests/unit/test_config_fields.py::test_show_hidden_metrics_for_version_is_checked_as_the_kubelet_checks_it"),
    "iptablesDropBit": ("unused", "tests/unit/test_iptables_chains.py::test_the_iptables_bits_are_checked_as_the_kubelet_checks_them"),
    "cpuManagerPolicyOptions": ("effect", "tests/cpu_manager/test_cpu_sets.py::test_exclusive_cpus_and_the_shared_pool"),
    "topologyManagerPolicy": ("effect", "tests/cpu_manager/test_cpu_sets.py::test_exclusive_cpus_and_the_shared_pool"),
    "topologyManagerScope": ("effect", "tests/cpu_manager/test_cpu_sets.py::test_exclusive_cpus_and_the_shared_pool"),
    "memoryManagerPolicy": ("effect", "tests/cpu_manager/test_cpu_sets.py::test_exclusive_cpus_and_the_shared_pool"),
    "reservedMemory": ("effect", "tests/integration/test_start_refusals.py::test_reserved_memory_must_be_the_nodes_memory_reservation"),
    "featureGates": ("effect", "tests/integration/test_start_refusals.py::test_a_feature_gate_other_than_the_kubelets_default_refuses_the_start_naming_it"),
    "healthzPort": ("effect", "tests/integration/test_services.py::test_healthz_is_ok_while_every_service_is_alive"),
    "healthzBindAddress": ("effect", "tests/integration/test_services.py::test_healthz_is_ok_while_every_service_is_alive"),
    "staticPodURL": ("effect", "tests/integration/test_static_pods.py::test_pods_from_the_manifest_url_run_and_go_with_it"),
    "staticPodURLHeader": ("effect", "tests/integration/test_static_pods.py::test_pods_from_the_manifest_url_run_and_go_with_it"),
    "httpCheckFrequency": ("effect", "tests/integration/test_static_pods.py::test_pods_from_the_manifest_url_run_and_go_with_it"),
    "fileCheckFrequency": ("effect", "tests/cpu_manager/test_node_settings.py::test_a_manifest_no_directory_event_announces_is_found_within_file_check_frequency"),
    "maxPods": ("effect", "tests/cluster/test_node.py::test_node_registers_ready_with_the_kubelets_fields"),
    "cgroupDriver": ("effect", "tests/vm/test_production_host.py::test_pod_limits_land_in_the_pod_and_container_cgroups"),
    "singleProcessOOMKill": ("effect", "tests/vm/test_production_host.py::test_an_oom_kill_ends_every_process_of_the_container"),
    "shutdownGracePeriod": ("effect", "tests/vm/test_production_host.py::test_poweroff_waits_for_the_pods_to_stop_the_critical_ones_last"),
    "shutdownGracePeriodCriticalPods": ("effect", "tests/vm/test_production_host.py::test_poweroff_waits_for_the_pods_to_stop_the_critical_ones_last"),
    "shutdownGracePeriodByPodPriority": ("effect", "tests/vm/test_production_host.py::test_poweroff_stops_the_pods_group_by_group_of_shutdown_grace_period_by_pod_priority"),
    "podPidsLimit": ("effect", "tests/security/test_fork_bomb.py::test_a_fork_bomb_is_held_at_the_pod_pids_limit"),
    "registerNode": ("effect", "tests/cluster/test_zzz_unregistered_node.py::test_a_node_that_does_not_register_waits_for_its_node_object_and_keeps_to_its_budgets"),
    "registerWithTaints": ("effect", "tests/cluster/test_node.py::test_node_registers_ready_with_the_kubelets_fields"),
    "providerID": ("effect", "tests/cluster/test_node.py::test_node_registers_ready_with_the_kubelets_fields"),
    "seccompDefault": ("effect", "tests/security/test_pod_isolation.py::test_namespaces_sysctls_seccomp_and_dns_reach_the_containers"),
    "logging": ("effect", "tests/cpu_manager/test_node_settings.py::test_every_service_logs_json_lines"),
    "containerLogMonitorInterval": ("effect", "tests/integration/test_lifecycle.py::test_container_logs_are_rotated"),
    "containerLogMaxWorkers": ("effect", "tests/cpu_manager/test_node_settings.py::test_logs_are_compressed_up_to_container_log_max_workers_at_once"),
    "imageMaximumGCAge": ("effect", "tests/cpu_manager/test_image_gc.py::test_an_image_unused_for_image_maximum_gc_age_is_removed_whatever_the_disk"),
    "resolvConf": ("effect", "tests/integration/test_static_pods.py::test_pods_get_the_resolv_conf_the_config_names"),
    "memorySwap": ("effect", "tests/vm/test_production_host.py::test_containers_swap_as_memory_swap_says"),
    "kubeletCgroups": ("effect", "tests/cpu_manager/test_node_settings.py::test_the_nodes_own_processes_run_in_kubelet_cgroups"),
    "tracing": ("effect", "tests/cpu_manager/test_node_settings.py::test_pod_syncs_and_runtime_calls_are_traced_to_the_tracing_endpoint"),
    "userNamespaces": ("effect", "tests/vm/test_backports_kernel.py::test_a_pod_with_host_users_false_runs_in_a_user_namespace"),
    "failSwapOn": ("effect", "tests/integration/test_start_refusals.py::test_swap_on_refuses_the_start_unless_fail_swap_on_is_false"),
    "protectKernelDefaults": ("effect", "tests/integration/test_start_refusals.py::test_protect_kernel_defaults_names_each_tunable_that_differs"),
    "failCgroupV1": ("effect", "tests/integration/test_start_refusals.py::test_fail_cgroup_v1_refuses_the_start_on_this_cgroup_v1_host"),
    "runtimeRequestTimeout": ("effect", "tests/cpu_manager/test_node_settings.py::test_calls_to_a_runtime_that_stops_answering_fail_after_runtime_request_timeout"),
    "serializeImagePulls": ("effect", "tests/security/test_image_pulls.py::test_serialized_pulls_run_one_at_a_time"),
    "maxParallelImagePulls": ("effect", "tests/cpu_manager/test_node_settings.py::test_images_are_pulled_at_most_max_parallel_image_pulls_at_once"),
    "containerLogMaxSize": ("effect", "tests/integration/test_lifecycle.py::test_container_logs_are_rotated"),
    "containerLogMaxFiles": ("effect", "tests/integration/test_lifecycle.py::test_container_logs_are_rotated"),
    "kubeAPIQPS": ("effect", "tests/cluster/test_zzz_unregistered_node.py::test_a_node_that_does_not_register_waits_for_its_node_object_and_keeps_to_its_budgets"),
    "kubeAPIBurst": ("effect", "tests/cluster/test_zzz_unregistered_node.py::test_a_node_that_does_not_register_waits_for_its_node_object_and_keeps_to_its_budgets"),
    "nodeStatusUpdateFrequency": ("effect", "tests/cluster/test_node.py::test_the_nodes_images_are_in_its_status_within_node_status_update_frequency"),
    "nodeStatusReportFrequency": ("effect", "tests/cluster/test_node.py::test_node_status_is_reported_every_node_status_report_frequency"),
    "nodeLeaseDurationSeconds": ("effect", "tests/cluster/test_node.py::test_lease_is_renewed"),
    "eventRecordQPS": ("effect", "tests/cluster/test_zzz_unregistered_node.py::test_a_node_that_does_not_register_waits_for_its_node_object_and_keeps_to_its_budgets"),
    "eventBurst": ("effect", "tests/cluster/test_zzz_unregistered_node.py::test_a_node_that_does_not_register_waits_for_its_node_object_and_keeps_to_its_budgets"),
    "crashLoopBackOff": ("effect", "tests/integration/test_lifecycle.py::test_restart_delays_follow_the_back_off"),
    "volumeStatsAggPeriod": ("effect", "tests/integration/test_volumes.py::test_local_volumes_as_containers_see_them"),
    "serverTLSBootstrap": ("effect", "tests/cluster/test_node_api.py::test_serving_certificate_comes_from_a_csr_and_rotates"),
    "rotateCertificates": ("effect", "tests/bootstrap/test_tls_bootstrap.py::"
                                     "test_the_client_certificate_rotates_and_the_node_outlives_the_first_one"),
    "evictionHard": ("effect", "tests/eviction/test_pressure.py::test_memory_hog_is_evicted_and_guaranteed_pod_untouched"),
    "evictionSoft": ("effect", "tests/eviction/test_pressure.py::test_a_soft_threshold_evicts_after_its_grace_period_giving_at_most_the_max_pod_grace"),
    "evictionSoftGracePeriod": ("effect", "tests/eviction/test_pressure.py::test_a_soft_threshold_evicts_after_its_grace_period_giving_at_most_the_max_pod_grace"),
    "evictionMaxPodGracePeriod": ("effect", "tests/eviction/test_pressure.py::test_a_soft_threshold_evicts_after_its_grace_period_giving_at_most_the_max_pod_grace"),
    "evictionMinimumReclaim": ("effect", "tests/eviction/test_pressure.py::test_after_a_memory_eviction_the_node_evicts_on_until_the_minimum_reclaim_is_back"),
    "evictionPressureTransitionPeriod": ("effect", "tests/eviction/test_pressure.py::test_memory_hog_is_evicted_and_guaranteed_pod_untouched"),
    "kubeReserved": ("effect", "tests/cluster/test_node.py::test_node_registers_ready_with_the_kubelets_fields"),
    "systemReserved": ("effect", "tests/cluster/test_node.py::test_node_registers_ready_with_the_kubelets_fields"),
    "systemReservedCgroup": ("effect", "tests/cluster/test_node.py::test_system_and_kube_reserved_are_enforced_on_their_cgroups"),
    "memoryThrottlingFactor": ("effect", "tests/vm/test_production_host.py::test_the_kubelet_1_37_in_this_guest_sets_the_cgroups_pykubelet_sets"),
    "memoryReservationPolicy": ("effect", "tests/vm/test_production_host.py::test_the_kubelet_1_37_in_this_guest_sets_the_cgroups_pykubelet_sets"),
    "cgroupRoot": ("effect", "tests/cpu_manager/test_node_settings.py::test_the_pods_cgroups_are_below_cgroup_root"),
    "registryPullQPS": ("effect", "tests/integration/test_registry_qps.py::test_pulls_beyond_registry_pull_qps_fail_and_are_made_later"),
    "registryBurst": ("effect", "tests/integration/test_registry_qps.py::test_pulls_beyond_registry_pull_qps_fail_and_are_made_later"),
    "enableSystemLogHandler": ("effect", "tests/cluster/test_node_api.py::test_the_nodes_var_log_is_served_under_logs"),
    "imagePullCredentialsVerificationPolicy": ("effect", "tests/cluster/test_pull_secrets.py::"
                                                         "test_an_image_pulled_with_a_secret_is_used_only_by_pods_that_show_it"),
    "preloadedImagesVerificationAllowlist": ("effect", "tests/integration/test_pull_verification.py::"
                                                       "test_only_allowlisted_preloaded_images_are_used_without_a_pull"),
    "kernelMemcgNotification": ("effect", "tests/eviction/test_pressure.py::"
                                          "test_memory_hog_is_evicted_and_guaranteed_pod_untouched"),
    "localStorageCapacityIsolation": ("effect", "tests/integration/test_local_storage_isolation.py::"
                                                "test_without_local_storage_isolation_nothing_requests_or_limits_local_storage"),
    "hairpinMode": ("effect", "tests/cpu_manager/test_node_settings.py::"
                              "test_hairpin_mode_none_leaves_the_pods_bridge_port_without_hairpin"),
    "cpuCFSQuotaPeriod": ("effect", "tests/cluster/test_pod_resize.py::test_resize_cpu_in_place_then_memory_with_a_restart"),
    "enableSystemLogQuery": ("effect", "tests/cluster/test_node_api.py::"
                                       "test_node_log_queries_read_a_service_log_of_var_log_as_the_kubelets_do"),
    "cpuCFSQuota": ("effect", "tests/cpu_manager/test_node_settings.py::test_the_pods_cgroups_are_below_cgroup_root"),
    "mergeDefaultEvictionSettings": ("effect", "tests/cpu_manager/test_node_settings.py::test_eviction_hard_keeps_the_default_thresholds_of_the_signals_it_does_not_name"),
    "podsPerCore": ("effect", "tests/cluster/test_node.py::test_node_registers_ready_with_the_kubelets_fields"),
    "oomScoreAdj": ("effect", "tests/cpu_manager/test_node_settings.py::test_every_process_of_the_node_runs_at_oom_score_adj_and_max_open_files"),
    "maxOpenFiles": ("effect", "tests/cpu_manager/test_node_settings.py::test_every_process_of_the_node_runs_at_oom_score_adj_and_max_open_files"),
    "kubeReservedCgroup": ("effect", "tests/cluster/test_node.py::test_system_and_kube_reserved_are_enforced_on_their_cgroups"),
    "enforceNodeAllocatable": ("effect", "tests/integration/test_services.py::test_enforce_node_allocatable_caps_the_pods_cgroup"),
    "imageGCHighThresholdPercent": ("effect", "tests/cpu_manager/test_image_gc.py::test_past_the_high_threshold_unused_images_go_until_the_low_one"),
    "imageGCLowThresholdPercent": ("effect", "tests/cpu_manager/test_image_gc.py::test_past_the_high_threshold_unused_images_go_until_the_low_one"),
    "imageMinimumGCAge": ("effect", "tests/eviction/test_pressure.py::test_disk_pressure_collects_unused_images_first_then_evicts"),
    "allowedUnsafeSysctls": ("effect", "tests/security/test_pod_isolation.py::test_an_unsafe_sysctl_the_node_allows_is_set"),
    "nodeStatusMaxImages": ("effect", "tests/cluster/test_zzz_unregistered_node.py::test_a_node_that_does_not_register_waits_for_its_node_object_and_keeps_to_its_budgets"),
}
REFUSED_TEST = "tests/unit/test_config_fields.py::test_a_refused_field_at_another_value_stops_the_start_naming_it"
_KIND = {"effect": "effect", "direct": "effect (value given to the component)", "parse": "validation only",
         "unused": "check only (it changes nothing in the kubelet 1.37 at its default feature gates)",
         "one-numa": "check only (it changes nothing on a host with one NUMA node, in the kubelet either)",
         "none": "no test of its effect yet"}


def implemented() -> dict[str, object]:
    return {f.alias or name: f.default for name, f in KubeletConfiguration.model_fields.items()
            if (f.alias or name) not in ("apiVersion", "kind")}


def _where(test: str | None) -> str:
    """Unit tests run the code with fakes of the runtime, the bus and the host; every other
    package runs real nodes."""
    if not test:
        return ""
    return " in a unit test (fakes)" if test.startswith("tests/unit/") else " on a running node"


def _coverage(impl: dict[str, object]) -> list[str]:
    unused = sorted((n for n in FIELDS if n in impl and TESTS.get(n, ("none", None))[0] in ("unused", "one-numa")),
                    key=str.lower)
    names = [n for n in FIELDS if n in impl and n not in unused]
    live = [n for n in names if _where(TESTS.get(n, ("none", None))[1]) == " on a running node"]
    unit = sorted(set(names) - set(live), key=str.lower)
    besides = (f" Besides them, {len(unused)} ({', '.join(f'`{n}`' for n in unused)}) are checked as the kubelet "
               "1.37 checks them and change nothing, there as here (at the kubelet's default feature gates, which "
               "pykubelet keeps; the topology manager's options on a host with one NUMA node, the only kind "
               "pykubelet runs topology policies on)." if unused else "")
    if not unit:
        return [f"All {len(names)} implemented fields have their effect observed on a running node.{besides}"]
    return [f"{len(live)} of the {len(names)} implemented fields have their effect observed on a running node; "
            f"the effect of {len(unit)} ({', '.join(f'`{n}`' for n in unit)}) is observed in unit tests only.{besides}"]


def render() -> str:
    impl = implemented()
    out = ["# KubeletConfiguration fields in pykubelet", "",
           "Every field of `kubelet.config.k8s.io/v1beta1` in Kubernetes 1.37, in one of two states:",
           "",
           "- **implemented**: it has the kubelet's effect;",
           "- **refused unless default**: accepted only at the kubelet's default (then pykubelet does what "
           "the last column says); any other value stops the start with an error naming the field.",
           "",
           "Generated by `python -m tests.config_fields_doc` from `shared/config/settings.py` and "
           "`shared/config/refused.py`.", "",
           *_coverage(impl), "",
           "| field | state | kubelet default | pykubelet | test |", "|---|---|---|---|---|"]
    for name in sorted(FIELDS, key=str.lower):
        if name in impl:
            kind, test = TESTS.get(name, ("none", None))
            out.append(f"| `{name}` | implemented | | | {_KIND[kind]}{_where(test)}{f': `{test}`' if test else ''} |")
        else:
            r = REFUSED[name]
            default = "unset" if r.default is None else f"`{shown(r.default)}`"
            also = "".join(f" (also `{shown(v)}`, which is what it does)" for v in r.also)
            out.append(f"| `{name}` | refused unless default | {default} | {r.instead}{also} | `{REFUSED_TEST}` |")
    return "\n".join(out + ["", *render_flags()]) + "\n"


FLAGS_TEST = "tests/unit/test_kubelet_flags.py"


def render_flags() -> list[str]:
    impl = implemented()
    out = ["# The kubelet's command line in pykubelet", "",
           "Every flag of the kubelet 1.37 (`pykubelet up` and every service take them; `pykubelet up` "
           "hands them to the services it starts). A configuration flag sets its field on top of the "
           "`--config` file, and the field is then implemented or refused as in the table above; the "
           "kubelet's deprecation notice is printed for the flags the kubelet deprecates. Abbreviated "
           "flags are not accepted. Generated from `shared/config/flags.py`; tested in "
           f"`{FLAGS_TEST}` (and against the kubelet 1.37 source in `tests/cluster/test_kubelet_flags_source.py`).",
           "", "| flag | sets | state | deprecated |", "|---|---|---|---|"]
    for f in sorted(FLAGS, key=lambda f: f.name):
        if f.field:
            top = f.field.split(".")[0]
            state = "implemented" if top in impl and top not in REFUSED else "refused unless default"
            if f.field in REFUSED_PARTS:
                state = f"refused unless default ({REFUSED_PARTS[f.field]})"
            sets = f"`{f.field}`"
        elif f.setting:
            sets, state = "the node's " + f.name.replace("-", " "), "implemented"
        else:
            sets, state = "", f"refused unless `{f.default!r}`: {f.refused}"
        out.append(f"| `--{f.name}` | {sets} | {state} | {'yes' if f.deprecated else ''} |")
    return out


if __name__ == "__main__":
    print(render(), end="")
