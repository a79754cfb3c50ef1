variable "service_name" {
  description = "The config's service.name, the Service dimension of every metric."
  type        = string
  validation {
    condition     = can(regex("^[A-Za-z0-9._-]{1,64}$", var.service_name))
    error_message = "service_name: 1-64 of A-Z a-z 0-9 . _ -"
  }
}

variable "namespace" {
  description = "The config's publish.namespace."
  type        = string
  default     = "Readyprobe"
}

variable "branches" {
  description = "The failover record's two branches: the config's branch name (the Branch dimension), its role, and its branch-specific DNS name (the record's CNAME target)."
  type = list(object({
    name     = string
    role     = string
    endpoint = string
  }))
  validation {
    condition     = length(var.branches) == 2 && length(setintersection(toset([for b in var.branches : b.role]), toset(["PRIMARY", "SECONDARY"]))) == 2
    error_message = "branches: exactly two, one with role PRIMARY and one with role SECONDARY."
  }
  validation {
    condition     = length(toset([for b in var.branches : b.name])) == 2
    error_message = "branches: the two names must differ."
  }
}

variable "stable_name" {
  description = "The failover record's name (the config's service.stable_name)."
  type        = string
}

variable "hosted_zone_id" {
  description = "The private hosted zone that holds the failover records."
  type        = string
}

variable "record_ttl" {
  description = "TTL of the failover records, seconds (at most 60, so that clients follow a failover within a minute)."
  type        = number
  default     = 60
  validation {
    condition     = var.record_ttl >= 1 && var.record_ttl <= 60
    error_message = "record_ttl: 1 to 60 seconds."
  }
}

variable "alarm_statistic" {
  description = "The quorum rule over the probers' datums in a minute: Minimum - any prober says unready; Maximum - all do; Average - a majority does."
  type        = string
  default     = "Minimum"
  validation {
    condition     = contains(["Minimum", "Maximum", "Average"], var.alarm_statistic)
    error_message = "alarm_statistic: Minimum, Maximum or Average."
  }
}

variable "evaluation_periods" {
  description = "Minutes the statistic must be below its threshold (datapoints_to_alarm is the same; readyprobe holds the hysteresis)."
  type        = number
  default     = 1
  validation {
    condition     = var.evaluation_periods >= 1 && var.evaluation_periods <= 5
    error_message = "evaluation_periods: 1 to 5."
  }
}

variable "insufficient_data_health_status" {
  description = "What each health check reports while its alarm has no data (no prober runs, or all are unknown). No default: the operator chooses (docs/deploy.md)."
  type        = string
  validation {
    condition     = contains(["Healthy", "Unhealthy", "LastKnownStatus"], var.insufficient_data_health_status)
    error_message = "insufficient_data_health_status: Healthy, Unhealthy or LastKnownStatus."
  }
}

variable "heartbeat_missing_minutes" {
  description = "Minutes without any Heartbeat datum before the prober-dead alarm fires."
  type        = number
  default     = 3
  validation {
    condition     = var.heartbeat_missing_minutes >= 2 && var.heartbeat_missing_minutes <= 10
    error_message = "heartbeat_missing_minutes: 2 to 10."
  }
}

variable "alarm_topic_arn" {
  description = "SNS topic for the heartbeat and fail-open alarms (null - no action)."
  type        = string
  default     = null
}

variable "mode" {
  description = "service - an ECS service, one task per subnet's AZ; scheduled - an EventBridge Scheduler schedule runs one task per schedule_expression, for run_duration."
  type        = string
  default     = "service"
  validation {
    condition     = contains(["service", "scheduled"], var.mode)
    error_message = "mode: service or scheduled."
  }
}

variable "cluster_arn" {
  description = "ARN of the ECS cluster the prober runs in."
  type        = string
}

variable "desired_count" {
  description = "Tasks of the ECS service (mode service); one per Availability Zone, i.e. one per subnet."
  type        = number
  default     = 2
  validation {
    condition     = var.desired_count >= 1
    error_message = "desired_count: at least 1."
  }
}

variable "schedule_expression" {
  description = "EventBridge Scheduler expression (mode scheduled)."
  type        = string
  default     = "rate(1 minute)"
}

variable "run_duration" {
  description = "readyprobe run --duration (mode scheduled); shorter than the schedule's interval so runs do not overlap."
  type        = string
  default     = "50s"
  validation {
    condition     = can(regex("^[0-9]+(ms|s|m)$", var.run_duration))
    error_message = "run_duration: a duration with a unit, e.g. 50s."
  }
}

variable "prober_id" {
  description = "The stable --prober-id of the scheduled task (mode scheduled); tasks of the service use their host name."
  type        = string
  default     = "scheduled"
  validation {
    condition     = can(regex("^[A-Za-z0-9._-]{1,64}$", var.prober_id))
    error_message = "prober_id: 1-64 of A-Z a-z 0-9 . _ -"
  }
}

variable "vpc_id" {
  description = "The VPC of the branches and of the private hosted zone."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets, one per Availability Zone."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) >= 1
    error_message = "subnet_ids: at least one subnet."
  }
}

variable "probe_egress_cidr" {
  description = "Where the branches and the VPC resolver are (all TCP and DNS over UDP to it)."
  type        = string
  validation {
    condition     = can(cidrhost(var.probe_egress_cidr, 0))
    error_message = "probe_egress_cidr: an IPv4 CIDR block."
  }
}

variable "extra_security_group_ids" {
  description = "Further security groups for the task."
  type        = list(string)
  default     = []
}

variable "image" {
  description = "The readyprobe image (Dockerfile at the repository root), by digest preferably."
  type        = string
}

variable "config_path" {
  description = "The config file inside the container (baked into the image, or on the EFS file system below)."
  type        = string
  default     = "/etc/readyprobe/readyprobe.toml"
}

variable "config_file_system_id" {
  description = "EFS file system whose root holds the config, mounted read-only at /etc/readyprobe (null - the config is baked in)."
  type        = string
  default     = null
}

variable "state_bucket" {
  description = "S3 bucket of the state store (the config's [state.s3] bucket)."
  type        = string
}

variable "state_prefix" {
  description = "The config's [state.s3] key_prefix."
  type        = string
  default     = "readyprobe/"
}

variable "probe_secret_arn" {
  description = "Secrets Manager secret ARN injected as probe_secret_env (null - none)."
  type        = string
  default     = null
}

variable "probe_secret_env" {
  description = "Environment variable the config reads the secret from, e.g. password = { env = \"READYPROBE_MYSQL_PASSWORD\" }."
  type        = string
  default     = "READYPROBE_MYSQL_PASSWORD"
}

variable "log_retention_days" {
  description = "Retention of the prober's log group (logs, EMF metrics)."
  type        = number
  default     = 30
  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 3653], var.log_retention_days)
    error_message = "log_retention_days: a value CloudWatch Logs accepts."
  }
}
