//! The response body cap every SDK client of the prober carries.

/// An AWS SDK interceptor that caps every response body the client reads at `limit` bytes.
///
/// The SDK reads an error response's body whole before it parses it, and a hostile or broken
/// endpoint can stream one for ever: without this cap memory grows at link speed until the
/// operation timeout. A longer body fails the read ("length limit exceeded"), which the SDK
/// reports as a response error: the call fails like any unreadable answer.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

impl aws_sdk_cloudwatch::config::Intercept for BodyLimit {
    fn name(&self) -> &'static str {
        "readyprobe-body-limit"
    }

    fn modify_before_deserialization(
        &self,
        context: &mut aws_sdk_cloudwatch::config::interceptors::BeforeDeserializationInterceptorContextMut<'_>,
        _runtime_components: &aws_sdk_cloudwatch::config::RuntimeComponents,
        _cfg: &mut aws_sdk_cloudwatch::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        use aws_smithy_types::body::SdkBody;
        let body = context.response_mut().body_mut();
        let whole = std::mem::replace(body, SdkBody::taken());
        *body = SdkBody::from_body_1_x(http_body_util::Limited::new(whole, self.0));
        Ok(())
    }
}
