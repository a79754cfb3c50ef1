data "aws_partition" "current" {}
data "aws_caller_identity" "current" {}

locals {
  scheduled = var.mode == "scheduled"
  # --grace of every run (the binary's default, written out because the schedule depends on it).
  grace_seconds = 10
  # Mode scheduled: a run lasts the rate less this margin. The process ends by --duration +
  # --grace + 2 s (12 s before the next run if both tasks take as long to start), and the gap
  # without probing, about the margin, stays under the 40 s after which the default policy's
  # first evaluation finds too few attempts (docs/deploy.md, scheduled mode).
  schedule_margin_seconds = 25
  run_duration            = "${var.schedule_minutes * 60 - local.schedule_margin_seconds}s"
  schedule_expression     = var.schedule_minutes == 1 ? "rate(1 minute)" : "rate(${var.schedule_minutes} minutes)"
  # One prober per subnet (Availability Zone), each with its own task definition, so that each
  # gets its own stable prober_id "<name>-<subnet id>".
  slots = { for s in var.subnet_ids : s => s }
  command = concat(["run", "--config", coalesce(var.config_s3_uri, var.config_path), "--grace", "${local.grace_seconds}s"],
  local.scheduled ? ["--duration", local.run_duration] : [])
  # The heartbeat file `run` rewrites every loop tick and `readyprobe health` reads, on the
  # writable volume (the root file system is read-only).
  heartbeat_path = "/var/lib/readyprobe/heartbeat"
  partition      = data.aws_partition.current.partition
  region         = data.aws_region.current.name
  account        = data.aws_caller_identity.current.account_id
  # The config object: "s3://bucket/key" -> "bucket/key".
  config_object = var.config_s3_uri == null ? null : trimprefix(var.config_s3_uri, "s3://")
  # The probe secret's ARN: as given, or the ARN of the name in this account and region (Secrets
  # Manager appends a hyphen and six random characters to the name).
  probe_secret_arn = var.probe_secret == null ? null : (startswith(var.probe_secret, "arn:") ? var.probe_secret : "arn:${local.partition}:secretsmanager:${local.region}:${local.account}:secret:${var.probe_secret}-??????")
  mount_points = concat([{ sourceVolume = "state", containerPath = "/var/lib/readyprobe", readOnly = false }],
  var.config_file_system_id == null ? [] : [{ sourceVolume = "config", containerPath = "/etc/readyprobe", readOnly = true }])
  security_group_ids = concat([aws_security_group.prober.id], var.extra_security_group_ids)
}

resource "aws_cloudwatch_log_group" "prober" {
  #checkov:skip=CKV_AWS_158:Logs and EMF metrics hold no secrets (readyprobe redacts them); CloudWatch Logs encrypts at rest with its own key.
  #checkov:skip=CKV_AWS_338:Retention is the operator's choice (log_retention_days); a prober's logs are not audit records.
  name              = "/readyprobe/${var.name}"
  retention_in_days = var.log_retention_days
}

resource "aws_security_group" "prober" {
  name_prefix = "readyprobe-${var.name}-"
  description = "readyprobe ${var.name}: no ingress; egress to the branches, the VPC resolver and AWS APIs"
  vpc_id      = var.vpc_id

  egress {
    description = "branch endpoints (any port the config names)"
    protocol    = "tcp"
    from_port   = 0
    to_port     = 65535
    cidr_blocks = [var.probe_egress_cidr]
  }
  egress {
    description = "VPC resolver"
    protocol    = "udp"
    from_port   = 53
    to_port     = 53
    cidr_blocks = [var.probe_egress_cidr]
  }
  egress {
    description = "CloudWatch, S3, Secrets Manager, ECR and Logs APIs without VPC endpoints"
    protocol    = "tcp"
    from_port   = 443
    to_port     = 443
    cidr_blocks = ["0.0.0.0/0"]
  }
}

# The task role: assumed by ECS tasks of this account and region only (confused deputy).
data "aws_iam_policy_document" "task_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = ["arn:${data.aws_partition.current.partition}:ecs:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:*"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

data "aws_iam_policy_document" "execution_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "task" {
  # PutMetricData has no resource-level permissions; the namespace condition key limits it to
  # namespace and the services' own (a request has one namespace: a list allows any of them).
  statement {
    actions   = ["cloudwatch:PutMetricData"]
    resources = ["*"]
    condition {
      test     = "StringEquals"
      variable = "cloudwatch:namespace"
      values   = distinct(concat([var.namespace], [for s in values(var.services) : s.namespace if s.namespace != null]))
    }
  }
  # One control document per service: <prefix>control-<service>.json (src/state.rs). The store
  # reads and conditionally writes that one object; it never lists, deletes or tags.
  statement {
    actions   = ["s3:GetObject", "s3:PutObject"]
    resources = ["arn:${data.aws_partition.current.partition}:s3:::${var.state_bucket}/${var.state_prefix}control-*.json"]
  }
  # The store never lists: ListBucket only makes S3 answer the first read of a missing document
  # with 404 (NoSuchKey) instead of 403. Limited to the control documents' names.
  statement {
    actions   = ["s3:ListBucket"]
    resources = ["arn:${data.aws_partition.current.partition}:s3:::${var.state_bucket}"]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.state_prefix}control-*"]
    }
  }
  # [evidence.s3]: the writer uploads segments under the prefix and lists it to find what an
  # earlier run left; it never reads, deletes or overwrites another prefix.
  dynamic "statement" {
    for_each = var.evidence_bucket == null ? [] : [var.evidence_bucket]
    content {
      actions   = ["s3:PutObject"]
      resources = ["arn:${local.partition}:s3:::${statement.value}/${var.evidence_prefix}*"]
    }
  }
  dynamic "statement" {
    for_each = var.evidence_bucket == null ? [] : [var.evidence_bucket]
    content {
      actions   = ["s3:ListBucket"]
      resources = ["arn:${local.partition}:s3:::${statement.value}"]
      condition {
        test     = "StringLike"
        variable = "s3:prefix"
        values   = ["${var.evidence_prefix}*"]
      }
    }
  }
  # Publishing into another account: assume the publish roles there (modules/publish-role, whose
  # trust names this task role and an external id), these and no other.
  dynamic "statement" {
    for_each = length(var.publish_role_arns) == 0 ? [] : [var.publish_role_arns]
    content {
      actions   = ["sts:AssumeRole"]
      resources = statement.value
    }
  }
  # --config s3://bucket/key: that one object, read at start and every [reload] poll.
  dynamic "statement" {
    for_each = local.config_object == null ? [] : [local.config_object]
    content {
      actions   = ["s3:GetObject"]
      resources = ["arn:${local.partition}:s3:::${statement.value}"]
    }
  }
  # The probe secret, read and refreshed by the prober itself (not injected by ECS at start, so a
  # rotation needs no restart).
  dynamic "statement" {
    for_each = local.probe_secret_arn == null ? [] : [local.probe_secret_arn]
    content {
      actions   = ["secretsmanager:GetSecretValue"]
      resources = [statement.value]
    }
  }
  # password = { rds_iam = ... }: the prober signs its login token; RDS checks rds-db:connect on
  # the named database users only.
  dynamic "statement" {
    for_each = length(var.rds_iam_db_users) == 0 ? [] : [var.rds_iam_db_users]
    content {
      actions   = ["rds-db:connect"]
      resources = statement.value
    }
  }
  dynamic "statement" {
    for_each = var.probe_secret_kms_key_arn == null ? [] : [var.probe_secret_kms_key_arn]
    content {
      actions   = ["kms:Decrypt"]
      resources = [statement.value]
      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["secretsmanager.${local.region}.amazonaws.com"]
      }
    }
  }
}

resource "aws_iam_role" "task" {
  name_prefix        = "readyprobe-task-"
  description        = "readyprobe ${var.name}: publish its metrics, use its control documents, evidence, config object and secret"
  assume_role_policy = data.aws_iam_policy_document.task_assume.json
}

resource "aws_iam_role_policy" "task" {
  name   = "readyprobe"
  role   = aws_iam_role.task.id
  policy = data.aws_iam_policy_document.task.json
}

resource "aws_iam_role" "execution" {
  name_prefix        = "readyprobe-exec-"
  description        = "readyprobe ${var.name}: pull the image, write logs"
  assume_role_policy = data.aws_iam_policy_document.execution_assume.json
}

resource "aws_iam_role_policy_attachment" "execution" {
  role       = aws_iam_role.execution.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
}

resource "aws_ecs_task_definition" "prober" {
  for_each = local.slots

  family                   = "readyprobe-${var.name}-${each.key}"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = "256"
  memory                   = "512"
  task_role_arn            = aws_iam_role.task.arn
  execution_role_arn       = aws_iam_role.execution.arn

  runtime_platform {
    cpu_architecture        = var.architecture
    operating_system_family = "LINUX"
  }

  # Evidence and scratch state (the control document itself lives in S3). The image declares this
  # path a VOLUME owned by its non-root user, so Fargate copies that ownership here.
  volume {
    name = "state"
  }

  dynamic "volume" {
    for_each = var.config_file_system_id == null ? [] : [var.config_file_system_id]
    content {
      name = "config"
      efs_volume_configuration {
        file_system_id     = volume.value
        transit_encryption = "ENABLED"
      }
    }
  }

  container_definitions = jsonencode([{
    name                   = "readyprobe"
    image                  = var.image
    essential              = true
    readonlyRootFilesystem = true
    user                   = "65532:65532"
    # Above --grace (10 s) + 2 s, so the final sync and publish finish after SIGTERM.
    stopTimeout = 20
    command     = local.command
    # Healthy while the run loop ticks: `health` exits 1 once the heartbeat file is older than
    # 30 s. Exec form, the image has no shell. startPeriod covers the first sync.
    healthCheck = {
      command     = ["CMD", "/usr/local/bin/readyprobe", "health"]
      interval    = 30
      timeout     = 5
      retries     = 3
      startPeriod = 60
    }
    # A stable prober_id per slot: a replaced task continues its predecessor's entry in the
    # control document instead of adding one (the host name would change with every task).
    environment = [
      { name = "READYPROBE_LOG_FORMAT", value = "json" },
      { name = "READYPROBE_PROBER_ID", value = "${var.name}-${each.key}" },
      { name = "READYPROBE_HEARTBEAT", value = local.heartbeat_path },
    ]
    mountPoints = local.mount_points
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.prober.name
        awslogs-region        = data.aws_region.current.name
        awslogs-stream-prefix = "readyprobe"
      }
    }
  }])
}

# Mode service: one ECS service per subnet, with one task. A deployment stops the old task before
# it starts the new one, so a prober_id never runs twice.
resource "aws_ecs_service" "prober" {
  for_each = local.scheduled ? {} : local.slots

  name                               = "readyprobe-${var.name}-${each.key}"
  cluster                            = var.cluster_arn
  task_definition                    = aws_ecs_task_definition.prober[each.key].arn
  launch_type                        = "FARGATE"
  desired_count                      = 1
  deployment_minimum_healthy_percent = 0
  deployment_maximum_percent         = 100
  propagate_tags                     = "SERVICE"

  # A task that never turns healthy (a bad image, config or role) stops the deployment and
  # brings back the last one that ran.
  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  network_configuration {
    subnets          = [each.value]
    security_groups  = local.security_group_ids
    assign_public_ip = false
  }
}

data "aws_iam_policy_document" "scheduler_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["scheduler.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

data "aws_iam_policy_document" "scheduler" {
  statement {
    actions   = ["ecs:RunTask"]
    resources = [for t in aws_ecs_task_definition.prober : t.arn]
    condition {
      test     = "ArnEquals"
      variable = "ecs:cluster"
      values   = [var.cluster_arn]
    }
  }
  statement {
    actions   = ["iam:PassRole"]
    resources = [aws_iam_role.task.arn, aws_iam_role.execution.arn]
    condition {
      test     = "StringEquals"
      variable = "iam:PassedToService"
      values   = ["ecs-tasks.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "scheduler" {
  count              = local.scheduled ? 1 : 0
  name_prefix        = "readyprobe-sched-"
  description        = "readyprobe ${var.name}: EventBridge Scheduler runs the prober task"
  assume_role_policy = data.aws_iam_policy_document.scheduler_assume.json
}

resource "aws_iam_role_policy" "scheduler" {
  count  = local.scheduled ? 1 : 0
  name   = "run-task"
  role   = aws_iam_role.scheduler[0].id
  policy = data.aws_iam_policy_document.scheduler.json
}

# Mode scheduled: one bounded run every schedule_minutes in each subnet.
resource "aws_scheduler_schedule" "prober" {
  #checkov:skip=CKV_AWS_297:The schedule holds no secret (a task definition ARN, subnets, security groups); the service encrypts it with its own key.
  for_each = local.scheduled ? local.slots : {}

  name                = "readyprobe-${var.name}-${each.key}"
  description         = "readyprobe ${var.name}: one run of ${local.run_duration} every ${var.schedule_minutes} min, state in S3"
  schedule_expression = local.schedule_expression
  state               = "ENABLED"

  flexible_time_window {
    mode = "OFF"
  }

  target {
    arn      = var.cluster_arn
    role_arn = aws_iam_role.scheduler[0].arn
    retry_policy {
      maximum_retry_attempts = 0
    }
    ecs_parameters {
      task_definition_arn = aws_ecs_task_definition.prober[each.key].arn
      task_count          = 1
      launch_type         = "FARGATE"
      network_configuration {
        subnets          = [each.value]
        security_groups  = local.security_group_ids
        assign_public_ip = false
      }
    }
  }
}
