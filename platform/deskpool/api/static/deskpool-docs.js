/* deskpool /docs: starts Swagger UI on this instance's OpenAPI document.
 *
 * Everything the page loads comes from this origin; the only other host it talks to is the
 * configured OIDC issuer, for sign-in (authorization code with PKCE). The configuration is the
 * JSON block the server renders into the page (deskpool.api.docs).
 */
(function () {
  "use strict";

  var config = JSON.parse(document.getElementById("deskpool-docs-config").textContent);
  var documentedDiscovery = config.oidc
    ? new URL(config.oidc.documentedDiscoveryPath, window.location.href).href
    : null;

  // The document's openIdConnect scheme names a path of this instance that redirects to the
  // issuer; ask the issuer directly instead, so the browser makes a plain CORS request.
  function requestInterceptor(request) {
    if (documentedDiscovery && new URL(request.url, window.location.href).href === documentedDiscovery) {
      request.url = config.oidc.discoveryUrl;
    }
    return request;
  }

  var ui = SwaggerUIBundle({
    url: new URL(config.documentUrl, window.location.href).href,
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    validatorUrl: null,
    displayRequestDuration: true,
    showExtensions: true,
    persistAuthorization: false,
    requestInterceptor: requestInterceptor,
    oauth2RedirectUrl: new URL(config.redirectPath, window.location.href).href
  });

  if (config.oidc) {
    ui.initOAuth({
      clientId: config.oidc.clientId,
      scopes: config.oidc.scopes,
      usePkceWithAuthorizationCodeGrant: true
    });
  }

  window.ui = ui;
})();
