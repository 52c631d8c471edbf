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
# tested), "none".
TESTS: dict[str, tuple[str, str | None]] = {
    "enableServer": ("effect", "tests/security_modes/test_file_modes.py::test_enable_server_false_runs_the_node_without_the_kubelet_api"),
    "address": ("effect", "tests/integration/test_services.py::test_the_kubelet_api_listens_where_address_and_read_only_port_say"),
    "port": ("effect", "tests/cluster/test_node_api.py::test_no_credentials_is_401"),
    "readOnlyPort": ("effect", "tests/integration/test_services.py::test_the_kubelet_api_listens_where_address_and_read_only_port_say"),
    "tlsCertFile": ("effect", "tests/unit/test_kubelet_api_tls.py::test_tls_cert_and_key_files_are_the_certificate_clients_see"),
    "tlsPrivateKeyFile": ("effect", "tests/unit/test_kubelet_api_tls.py::test_tls_cert_and_key_files_are_the_certificate_clients_see"),
    "tlsCipherSuites": ("effect", "tests/unit/test_kubelet_api_tls.py::test_tls_cipher_suites_are_the_only_tls12_suites_offered"),
    "tlsMinVersion": ("effect", "tests/unit/test_kubelet_api_tls.py::test_tls_min_version_refuses_an_older_client"),
    "authentication": ("effect", "tests/unit/test_node_api_server.py::test_x509_client_certificate_is_the_user"),
    "authorization": ("effect", "tests/cluster/test_node_api.py::test_rbac_decides_per_subresource"),
    "enableDebuggingHandlers": ("effect", "tests/unit/test_kubelet_api.py::test_debugging_handlers_off_removes_logs_and_streams"),
    "streamingConnectionIdleTimeout": ("direct", "tests/unit/test_node_api_server.py::test_a_stream_nothing_moves_on_is_closed_after_streaming_connection_idle_timeout"),
    "staticPodPath": ("effect", "tests/integration/test_static_pods.py::test_web_pod_answers_http_at_its_ip"),
    "podLogsDir": ("effect", "tests/unit/test_syncer.py::test_new_pod_gets_sandbox_and_containers"),
    "podCIDR": ("effect", "tests/integration/test_services.py::test_network_service_wrote_cni_config_and_reports_ready"),
    "clusterDNS": ("effect", "tests/unit/test_pod_isolation.py::test_dns_cluster_first_plus_dns_config"),
    "clusterDomain": ("effect", "tests/unit/test_pod_isolation.py::test_dns_cluster_first_plus_dns_config"),
    "containerRuntimeEndpoint": ("effect", "tests/integration/test_static_pods.py::test_web_pod_answers_http_at_its_ip"),
    "syncFrequency": ("effect", "tests/unit/test_periods.py::test_sync_frequency_is_the_wait_between_full_resyncs"),
    "cpuManagerPolicy": ("effect", "tests/cpu_manager/test_cpu_sets.py::test_exclusive_cpus_and_the_shared_pool"),
    "reservedSystemCPUs": ("effect", "tests/cpu_manager/test_cpu_sets.py::test_exclusive_cpus_and_the_shared_pool"),
    "cpuManagerReconcilePeriod": ("effect", "tests/cpu_manager/test_cpu_sets.py::test_exclusive_cpus_and_the_shared_pool"),
    "topologyManagerPolicy": ("effect", "tests/unit/test_cpu_manager.py::test_the_numa_policies_start_on_a_single_numa_host_and_are_refused_on_more"),
    "topologyManagerScope": ("effect", "tests/unit/test_cpu_manager.py::test_the_numa_policies_start_on_a_single_numa_host_and_are_refused_on_more"),
    "memoryManagerPolicy": ("effect", "tests/unit/test_cpu_manager.py::test_the_static_memory_policy_pins_guaranteed_containers_memory"),
    "reservedMemory": ("effect", "tests/unit/test_cpu_manager.py::test_reserved_memory_must_be_the_nodes_memory_reservation"),
    "featureGates": ("parse", "tests/unit/test_config_fields.py::test_feature_gates_at_the_kubelets_default_are_accepted_and_others_refused_by_name"),
    "healthzPort": ("effect", "tests/integration/test_services.py::test_healthz_is_ok_while_every_service_is_alive"),
    "healthzBindAddress": ("effect", "tests/integration/test_services.py::test_healthz_is_ok_while_every_service_is_alive"),
    "staticPodURL": ("effect", "tests/integration/test_static_pods.py::test_pods_from_the_manifest_url_run_and_go_with_it"),
    "staticPodURLHeader": ("effect", "tests/unit/test_url_source.py::test_a_pod_at_the_url_is_a_static_pod_of_the_node"),
    "httpCheckFrequency": ("effect", "tests/unit/test_url_source.py::test_http_check_frequency_is_how_often_the_url_is_fetched"),
    "fileCheckFrequency": ("effect", "tests/unit/test_periods.py::test_file_check_frequency_finds_a_manifest_no_event_announced"),
    "maxPods": ("direct", "tests/unit/test_admission.py::test_out_of_pods"),
    "cgroupDriver": ("effect", "tests/vm/test_production_host.py::test_pod_limits_land_in_the_pod_and_container_cgroups"),
    "shutdownGracePeriod": ("effect", "tests/vm/test_production_host.py::test_poweroff_waits_for_the_pods_to_stop_the_critical_ones_last"),
    "shutdownGracePeriodCriticalPods": ("effect", "tests/vm/test_production_host.py::test_poweroff_waits_for_the_pods_to_stop_the_critical_ones_last"),
    "shutdownGracePeriodByPodPriority": ("direct", "tests/unit/test_node_shutdown.py::test_shutdown_grace_period_is_two_priority_groups_as_the_kubelet_reads_it"),
    "podPidsLimit": ("effect", "tests/security/test_fork_bomb.py::test_a_fork_bomb_is_held_at_the_pod_pids_limit"),
    "registerNode": ("effect", "tests/unit/test_node_registration.py::test_register_node_false_never_creates_the_node_and_waits_for_it"),
    "registerWithTaints": ("effect", "tests/cluster/test_node.py::test_node_registers_ready_with_the_kubelets_fields"),
    "providerID": ("effect", "tests/cluster/test_node.py::test_node_registers_ready_with_the_kubelets_fields"),
    "seccompDefault": ("effect", "tests/security/test_pod_isolation.py::test_namespaces_sysctls_seccomp_and_dns_reach_the_containers"),
    "logging": ("effect", "tests/unit/test_cli.py::test_logging_format_json_makes_every_service_line_a_json_object"),
    "containerLogMonitorInterval": ("effect", "tests/unit/test_log_rotation.py::test_container_log_monitor_interval_is_the_wait_between_checks"),
    "containerLogMaxWorkers": ("effect", "tests/unit/test_log_rotation.py::test_container_log_max_workers_rotates_that_many_at_once"),
    "imageMaximumGCAge": ("effect", "tests/unit/test_pod_sync_eviction.py::test_image_maximum_gc_age_removes_images_unused_that_long_whatever_the_disk"),
    "resolvConf": ("effect", "tests/integration/test_static_pods.py::test_pods_get_the_resolv_conf_the_config_names"),
    "memorySwap": ("effect", "tests/vm/test_production_host.py::test_containers_swap_as_memory_swap_says"),
    "failSwapOn": ("effect", "tests/unit/test_host_checks.py::test_swap_on_stops_the_start_unless_fail_swap_on_is_false"),
    "protectKernelDefaults": ("effect", "tests/unit/test_host_checks.py::test_protect_kernel_defaults_names_each_tunable_that_differs"),
    "failCgroupV1": ("effect", "tests/unit/test_host_checks.py::test_fail_cgroup_v1_stops_the_start_on_a_cgroup_v1_host"),
    "runtimeRequestTimeout": ("effect", "tests/unit/test_cri_timeout.py::test_a_call_the_runtime_does_not_answer_fails_after_runtime_request_timeout"),
    "serializeImagePulls": ("effect", "tests/unit/test_image_pulls.py::test_pulls_at_once_follow_the_config"),
    "maxParallelImagePulls": ("effect", "tests/unit/test_image_pulls.py::test_pulls_at_once_follow_the_config"),
    "containerLogMaxSize": ("effect", "tests/integration/test_lifecycle.py::test_container_logs_are_rotated"),
    "containerLogMaxFiles": ("effect", "tests/integration/test_lifecycle.py::test_container_logs_are_rotated"),
    "kubeAPIQPS": ("direct", "tests/unit/test_kube_api.py::test_every_request_draws_on_the_node_budget"),
    "kubeAPIBurst": ("direct", "tests/unit/test_kube_api.py::test_every_request_draws_on_the_node_budget"),
    "nodeStatusUpdateFrequency": ("effect", "tests/unit/test_node_registration.py::test_node_status_update_frequency_is_how_often_the_status_is_looked_at"),
    "nodeStatusReportFrequency": ("effect", "tests/cluster/test_node.py::test_node_status_is_reported_every_node_status_report_frequency"),
    "nodeLeaseDurationSeconds": ("effect", "tests/cluster/test_node.py::test_lease_is_renewed"),
    "eventRecordQPS": ("effect", "tests/unit/test_event_rate.py::test_events_beyond_the_burst_wait_for_the_rate"),
    "eventBurst": ("effect", "tests/unit/test_event_rate.py::test_events_beyond_the_burst_wait_for_the_rate"),
    "crashLoopBackOff": ("effect", "tests/integration/test_lifecycle.py::test_restart_delays_follow_the_back_off"),
    "volumeStatsAggPeriod": ("effect", "tests/integration/test_volumes.py::test_local_volumes_as_containers_see_them"),
    "serverTLSBootstrap": ("effect", "tests/cluster/test_node_api.py::test_serving_certificate_comes_from_a_csr_and_rotates"),
    "rotateCertificates": ("effect", "tests/bootstrap/test_tls_bootstrap.py::"
                                     "test_the_client_certificate_rotates_and_the_node_outlives_the_first_one"),
    "evictionHard": ("effect", "tests/eviction/test_pressure.py::test_memory_hog_is_evicted_and_guaranteed_pod_untouched"),
    "evictionSoft": ("effect", "tests/unit/test_eviction.py::test_soft_threshold_waits_its_grace_period_and_caps_the_pod_grace"),
    "evictionSoftGracePeriod": ("effect", "tests/unit/test_eviction.py::test_soft_threshold_waits_its_grace_period_and_caps_the_pod_grace"),
    "evictionMaxPodGracePeriod": ("effect", "tests/unit/test_eviction.py::test_soft_threshold_waits_its_grace_period_and_caps_the_pod_grace"),
    "evictionMinimumReclaim": ("effect", "tests/unit/test_eviction.py::test_minimum_reclaim_keeps_the_threshold_until_enough_is_back"),
    "evictionPressureTransitionPeriod": ("effect", "tests/unit/test_eviction.py::test_hard_memory_threshold_evicts_the_hog_and_holds_the_condition"),
    "kubeReserved": ("effect", "tests/unit/test_pod_sync_eviction.py::test_pods_cgroup_capped_at_allocatable_without_the_hard_thresholds"),
    "systemReserved": ("effect", "tests/unit/test_pod_sync_eviction.py::test_pods_cgroup_capped_at_allocatable_without_the_hard_thresholds"),
    "enforceNodeAllocatable": ("effect", "tests/integration/test_services.py::test_enforce_node_allocatable_caps_the_pods_cgroup"),
    "imageGCHighThresholdPercent": ("direct", "tests/unit/test_pod_sync_eviction.py::test_periodic_image_gc_frees_down_to_the_low_threshold_least_recently_used_first"),
    "imageGCLowThresholdPercent": ("direct", "tests/unit/test_pod_sync_eviction.py::test_periodic_image_gc_frees_down_to_the_low_threshold_least_recently_used_first"),
    "imageMinimumGCAge": ("effect", "tests/eviction/test_pressure.py::test_disk_pressure_collects_unused_images_first_then_evicts"),
    "allowedUnsafeSysctls": ("direct", "tests/unit/test_pod_isolation.py::test_sysctls_safe_allowed_unsafe_and_host_namespaces"),
}
REFUSED_TEST = "tests/unit/test_config_fields.py::test_a_refused_field_at_another_value_stops_the_start_naming_it"
_KIND = {"effect": "effect", "direct": "effect (value given to the component)", "parse": "validation only",
         "none": "no test of its effect yet"}


def implemented() -> dict[str, object]:
    return {f.alias or name: f.default for name, f in KubeletConfiguration.model_fields.items()
            if (f.alias or name) not in ("apiVersion", "kind")}


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
           "| field | state | kubelet default | pykubelet | test |", "|---|---|---|---|---|"]
    for name in sorted(FIELDS, key=str.lower):
        if name in impl:
            kind, test = TESTS.get(name, ("none", None))
            out.append(f"| `{name}` | implemented | | | {_KIND[kind]}{f': `{test}`' if test else ''} |")
        else:
            r = REFUSED[name]
            default = "unset" if r.default is None else f"`{shown(r.default)}`"
            out.append(f"| `{name}` | refused unless default | {default} | {r.instead} | `{REFUSED_TEST}` |")
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
