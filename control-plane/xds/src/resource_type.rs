//! The xDS resource types, by name: the one table between a type and its type URL, so nothing
//! else in the control plane spells or compares a type URL.

use std::fmt;

/// A resource type Envoy can ask for over state-of-the-world xDS.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceType {
    /// CDS: `envoy.config.cluster.v3.Cluster`.
    Cluster,
    /// EDS: `envoy.config.endpoint.v3.ClusterLoadAssignment`.
    ClusterLoadAssignment,
    /// LDS: `envoy.config.listener.v3.Listener`.
    Listener,
    /// RDS: `envoy.config.route.v3.RouteConfiguration`.
    RouteConfiguration,
    /// SDS: `envoy.extensions.transport_sockets.tls.v3.Secret`.
    Secret,
    /// RTDS: `envoy.service.runtime.v3.Runtime`.
    Runtime,
    /// ECDS: `envoy.config.core.v3.TypedExtensionConfig` (what ferry serves: its filter config).
    ExtensionConfig,
}

impl ResourceType {
    pub const ALL: [ResourceType; 7] = [
        ResourceType::Cluster,
        ResourceType::ClusterLoadAssignment,
        ResourceType::Listener,
        ResourceType::RouteConfiguration,
        ResourceType::Secret,
        ResourceType::Runtime,
        ResourceType::ExtensionConfig,
    ];

    /// The type URL of requests, responses and the `Any` each resource is packed in.
    pub const fn type_url(self) -> &'static str {
        match self {
            ResourceType::Cluster => "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            ResourceType::ClusterLoadAssignment => {
                "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
            }
            ResourceType::Listener => "type.googleapis.com/envoy.config.listener.v3.Listener",
            ResourceType::RouteConfiguration => {
                "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
            }
            ResourceType::Secret => {
                "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
            }
            ResourceType::Runtime => "type.googleapis.com/envoy.service.runtime.v3.Runtime",
            ResourceType::ExtensionConfig => {
                "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"
            }
        }
    }

    /// The type a request names; None for a type this server does not know.
    pub fn from_type_url(type_url: &str) -> Option<ResourceType> {
        ResourceType::ALL
            .into_iter()
            .find(|t| t.type_url() == type_url)
    }
}

impl fmt::Display for ResourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.type_url())
    }
}

#[cfg(test)]
mod tests {
    use super::ResourceType;
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig;
    use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
    use envoy_types::pb::envoy::config::listener::v3::Listener;
    use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret;
    use envoy_types::pb::envoy::service::runtime::v3::Runtime;
    use prost::Name;

    #[test]
    fn type_urls_are_the_messages_own() {
        let pairs = [
            (ResourceType::Cluster, Cluster::type_url()),
            (
                ResourceType::ClusterLoadAssignment,
                ClusterLoadAssignment::type_url(),
            ),
            (ResourceType::Listener, Listener::type_url()),
            (
                ResourceType::RouteConfiguration,
                RouteConfiguration::type_url(),
            ),
            (ResourceType::Secret, Secret::type_url()),
            (ResourceType::Runtime, Runtime::type_url()),
            (
                ResourceType::ExtensionConfig,
                TypedExtensionConfig::type_url(),
            ),
        ];
        assert_eq!(pairs.len(), ResourceType::ALL.len());
        for (t, url) in pairs {
            assert_eq!(t.type_url(), url);
            assert_eq!(ResourceType::from_type_url(&url), Some(t));
        }
        assert_eq!(ResourceType::from_type_url(""), None);
        assert_eq!(
            ResourceType::from_type_url("type.googleapis.com/google.protobuf.BytesValue"),
            None
        );
    }
}
