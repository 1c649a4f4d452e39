"""The glue to the host, solo-learn: registering the plugin's methods into its registry and
building its methods and backbones from a config."""
