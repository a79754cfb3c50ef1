# The variables' validations at their bounds, the module planned as the root: the longest image
# reference and config path pass (their regexes hold no repeat count above RE2's 1000, which
# made every value fail once), and values one past each bound, or malformed, are refused.

provider "aws" {
  region                      = "eu-west-1"
  access_key                  = "plan-only"
  secret_key                  = "plan-only"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
}

override_data {
  target = data.aws_caller_identity.current
  values = {
    account_id = "123456789012"
  }
}

variables {
  name = "bounds"
  services = {
    "orders-db" = {
      stable_name    = "mysql.orders.internal.example"
      hosted_zone_id = "Z0123456789ABCDEFGHIJ"
      branches = [
        { name = "primary", role = "PRIMARY", endpoint = "mysql-primary.orders.internal.example" },
        { name = "secondary", role = "SECONDARY", endpoint = "mysql-secondary.orders.internal.example" },
      ]
    }
  }
  insufficient_data_health_status = "Healthy"
  cluster_arn                     = "arn:aws:ecs:eu-west-1:123456789012:cluster/c"
  vpc_id                          = "vpc-0123456789abcdef0"
  subnet_ids                      = ["subnet-0aaaaaaaaaaaaaaaa"]
  probe_egress_cidr               = "10.0.0.0/8"
  state_bucket                    = "state-bucket"
}

run "accepts_values_at_the_bounds" {
  command = plan
  variables {
    image            = replace(format("%1024s", ""), " ", "i")
    config_path      = "/${replace(format("%4095s", ""), " ", "c")}"
    config_s3_uri    = "s3://config-bucket/prober/readyprobe.toml"
    probe_secret     = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:rds!cluster-0a1b-AbCdEf"
    rds_iam_db_users = ["arn:aws:rds-db:eu-west-1:123456789012:dbuser:cluster-ABCDEFGHIJKL0123456789/readyprobe"]
  }
  assert {
    condition = contains(jsondecode(output.task_role_policy).Statement, {
      Effect   = "Allow", Action = "rds-db:connect",
      Resource = "arn:aws:rds-db:eu-west-1:123456789012:dbuser:cluster-ABCDEFGHIJKL0123456789/readyprobe"
    })
    error_message = "rds-db:connect is not granted on exactly the named database user"
  }
  assert {
    condition     = output.password_config == "password = { secrets_manager = \"arn:aws:secretsmanager:eu-west-1:123456789012:secret:rds!cluster-0a1b-AbCdEf\" }"
    error_message = "a secret without json key: the whole SecretString"
  }
}

run "refuses_values_past_the_bounds" {
  command = plan
  variables {
    image            = replace(format("%1025s", ""), " ", "i")
    config_path      = "/${replace(format("%4096s", ""), " ", "c")}"
    config_s3_uri    = "s3://config-bucket/prober/*.toml"
    probe_secret     = "a secret name with spaces"
    rds_iam_db_users = ["arn:aws:rds-db:eu-west-1:123456789012:dbuser:*/readyprobe"]
  }
  expect_failures = [var.image, var.config_path, var.config_s3_uri, var.probe_secret, var.rds_iam_db_users]
}
