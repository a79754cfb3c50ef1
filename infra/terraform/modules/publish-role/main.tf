# The publish role, in the account that holds the hosted zone and the health checks (a Route 53
# CLOUDWATCH_METRIC health check follows only an alarm of its own account): the probers' task
# roles, in another account, assume it with the external id and publish through it
# ([publish.cloudwatch] role_arn and external_id, or a service's publish); `check --aws` and
# `drill report --alarms` read through it. IAM is global: one role per account serves every
# region. The same role as infra/cloudformation/readyprobe-publish-role.yaml; call this module
# with that account's provider (examples/cross-account).

data "aws_iam_policy_document" "trust" {
  # The probers' task roles only, and only with the external id (confused deputy).
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "AWS"
      identifiers = var.trusted_role_arns
    }
    condition {
      test     = "StringEquals"
      variable = "sts:ExternalId"
      values   = [var.external_id]
    }
  }
}

data "aws_iam_policy_document" "publish" {
  # PutMetricData has no resource-level permissions; the namespace condition key limits it to
  # the config's namespaces (a request has one namespace: a list allows any of them).
  statement {
    actions   = ["cloudwatch:PutMetricData"]
    resources = ["*"]
    condition {
      test     = "StringEquals"
      variable = "cloudwatch:namespace"
      values   = distinct(var.namespaces)
    }
  }
}

data "aws_iam_policy_document" "read" {
  # What `check --aws` (src/aws_check/fetch.rs) and `drill report --alarms` (src/report/alarms.rs)
  # call, reads only. check --aws finds a branch's alarm by its metric and a health check by the
  # alarm it follows, in any name, so they are not limited to readyprobe's names.
  statement {
    #checkov:skip=CKV_AWS_356:Reads only; check --aws finds alarms by metric and health checks by alarm, whatever their names.
    actions = [
      "cloudwatch:DescribeAlarms",
      "cloudwatch:DescribeAlarmsForMetric",
      "cloudwatch:DescribeAlarmHistory",
      "cloudwatch:GetMetricStatistics",
      "route53:ListHealthChecks",
      "route53:ListHostedZonesByName",
      "route53:ListResourceRecordSets",
    ]
    resources = ["*"]
  }
}

resource "aws_iam_role" "publish" {
  name                 = var.role_name
  description          = "readyprobe - probers of another account publish their readiness metrics here and read the alarms and health checks"
  assume_role_policy   = data.aws_iam_policy_document.trust.json
  max_session_duration = 3600
}

resource "aws_iam_role_policy" "publish" {
  name   = "publish"
  role   = aws_iam_role.publish.id
  policy = data.aws_iam_policy_document.publish.json
}

resource "aws_iam_role_policy" "read" {
  name   = "read"
  role   = aws_iam_role.publish.id
  policy = data.aws_iam_policy_document.read.json
}
